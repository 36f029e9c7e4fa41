package cluster

import (
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

func TestMetaRoundTrip(t *testing.T) {
	m := Meta{ID: "n1", RaftAddr: "10.0.0.1:7000", AdminAddr: "127.0.0.1:9901", Version: "1.2.3",
		ClusterID: "c-1", HasState: true, Expect: 3, Durable: 42, Commands: "1111111", Clock: 493000, NoPersist: true, Voters: 5, Fanout: "3"}
	b, err := encodeMeta(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeMeta(b)
	if err != nil || got != m {
		t.Fatalf("decode(encode(m)) = %+v, %v; want %+v", got, err, m)
	}
}

func TestMetaOverMemberlistLimitRefused(t *testing.T) {
	m := Meta{ID: "n1", RaftAddr: strings.Repeat("a", memberlist.MetaMaxSize)}
	_, err := encodeMeta(m)
	if err == nil || !strings.Contains(err.Error(), "512") {
		t.Fatalf("encodeMeta of a %d-byte address: err = %v, want one naming the 512-byte limit", len(m.RaftAddr), err)
	}
}

func TestMetaIDMustBeNodeID(t *testing.T) {
	if err := validateMeta(Meta{ID: "b"}, "a"); err == nil || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("validateMeta(ID b, node a) = %v", err)
	}
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add([]byte(`{"id":"n1","raft":"1.2.3.4:7000","admin":"127.0.0.1:9901","v":"1","cid":"x","st":true,"exp":3,"di":9}`))
	f.Add([]byte(`{"id":1}`))
	f.Add([]byte(`{`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		enc, err := encodeMeta(m)
		if err != nil {
			return // too large to gossip: Open and UpdateMeta refuse it
		}
		if back, err := decodeMeta(enc); err != nil || back != m {
			t.Fatalf("meta %+v does not survive a round trip: %+v, %v", m, back, err)
		}
	})
}

func FuzzSplitState(f *testing.F) {
	f.Add([]byte{pushPullVersion, 1, 3, 'a', 'b', 'c', 2, 0})
	f.Add([]byte{pushPullVersion, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{9})
	f.Fuzz(func(t *testing.T, b []byte) {
		parts, err := splitState(b)
		if err != nil {
			return
		}
		total := 0
		for _, p := range parts {
			total += len(p)
		}
		if total > len(b) {
			t.Fatalf("parts hold %d bytes of a %d-byte buffer", total, len(b))
		}
	})
}
