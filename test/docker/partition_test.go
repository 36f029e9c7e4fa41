package docker

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// (d) Cut the leader off its peers (docker network disconnect; clients and
// backends still reach it): the majority elects a new leader and rotates a
// key there; the isolated node keeps serving its sessions and refuses writes
// with an error naming the missing leader; after healing it has every key
// and no session broke.
func TestPartitionLeader(t *testing.T) {
	e := newEnv(t)
	e.peers = e.prefix + "-peers"
	// A subnet of its own: nodes advertise fixed addresses there, and the
	// healed node gets its address back.
	e.subnet = fmt.Sprintf("10.%d.%d", 100+rand.IntN(100), rand.IntN(256))
	must(t, 60*time.Second, "docker", "network", "create", "--label", label, "--subnet", e.subnet+".0/24", e.peers)
	nodes, leader, _ := cluster3(t, e)
	old := byHost(nodes, leader)
	majority := others(nodes, old)

	la := newLoad(e, nodes...) // sessions that stay with the isolated node during the cut
	la.run(4, 25, 3*time.Minute)
	defer la.finish()
	testutil.Eventually(t, 60*time.Second, "100 sessions", func() bool { return la.newSessions.Load() >= 100 })
	lb := newLoad(e, majority...) // sessions that stay with the majority
	lb.run(4, 25, 3*time.Minute)
	defer lb.finish()
	lb.progress(t, 300)
	for _, c := range majority {
		la.remove(t, c)
	}

	ip := must(t, 60*time.Second, "docker", "inspect", "-f", `{{(index .NetworkSettings.Networks "`+e.peers+`").IPAddress}}`, old.name)
	must(t, 60*time.Second, "docker", "network", "disconnect", e.peers, old.name)
	newLeader, elected := e.waitLeader(30*time.Second, old.host, majority...)
	code, body, err := e.adminPost(majority[0], "/v1/keyring/rotate")
	if err != nil || code != http.StatusOK {
		t.Fatalf("rotate on the majority: %d %s %v", code, body, err)
	}
	var rotated struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal([]byte(body), &rotated)
	var refusal string
	testutil.Eventually(t, 30*time.Second, "the isolated node refuses writes", func() bool {
		code, body, err := e.adminPost(old, "/v1/keyring/rotate")
		var msg struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &msg)
		refusal = msg.Error
		return err == nil && code == http.StatusServiceUnavailable
	})
	if !strings.Contains(refusal, "leader") {
		t.Errorf("isolated node's refusal %q does not name the missing leader", refusal)
	}
	la.progress(t, 500)
	lb.progress(t, 500)

	must(t, 60*time.Second, "docker", "network", "connect", "--ip", ip, "--alias", "tether", "--alias", old.host, e.peers, old.name)
	healed := time.Now()
	// The majority may have moved its leadership on since the cut (an
	// election under load): the healed node must follow whichever leader
	// the majority names now, not necessarily the first one it elected.
	testutil.Eventually(t, 60*time.Second, "the healed node has the new key and follows the majority's leader", func() bool {
		s, err := e.status(old)
		if err != nil || s.LeaderID == "" {
			return false
		}
		for _, m := range majority {
			ms, err := e.status(m)
			if err != nil || ms.LeaderID != s.LeaderID {
				return false
			}
		}
		_, keys, err := e.keyIDs(old)
		return err == nil && keys[rotated.ID]
	})
	caughtUp := time.Since(healed)
	la.finish()
	lb.finish()

	// Every session, through any node.
	lc := newLoad(e, nodes...)
	client := newClient()
	for _, l := range []*load{la, lb} {
		for _, ws := range l.sessions {
			for _, s := range ws {
				if s.cookie == "" {
					continue
				}
				for k := 0; k < 3; k++ {
					lc.do(client, &s)
				}
			}
		}
	}
	figure(t, "leader %s cut off: %s elected in %d ms; isolated node refused a write with %q; healed node caught up in %d ms; isolated side: %s; majority: %s; afterwards through every node: %s",
		old.host, newLeader, elected.Milliseconds(), strings.TrimSpace(refusal), caughtUp.Milliseconds(), la.summary(), lb.summary(), lc.summary())
	la.check(t)
	lb.check(t)
	lc.check(t)
}
