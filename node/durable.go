package node

import (
	"bytes"
	"encoding/binary"
	"log/slog"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/node/leader"
)

// durableTag is the gossip tag of a member's direct durable-index report.
const durableTag = 'd'

// durableReports are the members' direct durable-index reports to the
// leader (gossip meta carries the indexes too, a gossip round later): a
// key's activation waits for every member's report. This node sends its
// own and, when it leads, records the members' in got, which the leader
// reads (leader.Reports).
type durableReports struct {
	self    string
	members *cluster.Membership // nil without gossip: nothing to report
	got     leader.Reports
	// wake wakes the leader's rounds.
	wake func()
	log  *slog.Logger
}

// report tells the leader (id to) at once how far this node holds the
// replicated state durably.
func (d *durableReports) report(to string, index uint64) {
	if d.members == nil || to == "" || to == d.self {
		return
	}
	msg := binary.AppendUvarint([]byte(d.self+"\x00"), index)
	if err := d.members.Send(to, durableTag, msg, false); err != nil {
		d.log.Debug("durable index report to the leader failed; gossip carries it", "error", err)
	}
}

// receive takes a member's report (on memberlist's goroutine: it only
// records and wakes the leader's rounds).
func (d *durableReports) receive(msg []byte) {
	i := bytes.IndexByte(msg, 0)
	if i <= 0 {
		return
	}
	index, k := binary.Uvarint(msg[i+1:])
	if k <= 0 {
		return
	}
	d.got.Note(string(msg[:i]), index)
	d.wake()
}
