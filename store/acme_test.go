package store

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/tether-proxy/tether/store/command"
)

func TestFSMAcmeStateReplicatesWrappedAndSurvivesSnapshots(t *testing.T) {
	src, kek := testFSM(t)
	secret := []byte("-----BEGIN EC PRIVATE KEY----- account key")
	errs := feed(t, src, kek,
		AcmeWrite{ReqID: "a1", Put: []AcmeEntry{{Name: "account/x", Secret: true, Value: secret}, {Name: "challenge/tok", Value: []byte("tok.thumb")}}},
		AcmeWrite{ReqID: "a2", Put: []AcmeEntry{{Name: "cert/x", Secret: true, Value: []byte("chain and key")}}, Delete: []string{"challenge/tok", "challenge/missing"}},
	)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	for _, tc := range []struct {
		desc, name string
		present    bool
	}{
		{"a put secret entry is held", "account/x", true},
		{"a put certificate is held", "cert/x", true},
		{"a deleted challenge is gone", "challenge/tok", false},
	} {
		if _, ok := src.acme[tc.name]; ok != tc.present {
			t.Errorf("%s: present %t", tc.desc, ok)
		}
	}
	if string(src.acme["account/x"].Value) != string(secret) {
		t.Error("the account key was not unwrapped for readers")
	}

	entry, err := command.Encode(kek, AcmeWrite{ReqID: "a3", Put: []AcmeEntry{{Name: "cert/y", Secret: true, Value: secret}}})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(entry, []byte("account key")) {
		t.Error("a secret ACME value is in the log in the clear")
	}

	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sink.Bytes(), []byte("account key")) || bytes.Contains(sink.Bytes(), []byte("chain and key")) {
		t.Fatal("a snapshot holds a secret ACME value in the clear")
	}
	dst, _ := testFSM(t)
	feed(t, dst, kek, AcmeWrite{ReqID: "old", Put: []AcmeEntry{{Name: "stale", Value: []byte("x")}}})
	if err := dst.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got, want := dst.dump(), src.dump(); got != want || !strings.Contains(got, "acme cert/x") {
		t.Fatalf("restored state differs:\n%s\nwant\n%s", got, want)
	}
}

func TestAcmeWriteRefusesBadEntries(t *testing.T) {
	_, kek := testFSM(t)
	for _, tc := range []struct {
		desc string
		cmd  AcmeWrite
	}{
		{"an empty write", AcmeWrite{ReqID: "e"}},
		{"an entry without a name", AcmeWrite{ReqID: "e", Put: []AcmeEntry{{Value: []byte("x")}}}},
		{"a value too large", AcmeWrite{ReqID: "e", Put: []AcmeEntry{{Name: "n", Value: make([]byte, command.MaxAcmeValue+1)}}}},
		{"an empty name to delete", AcmeWrite{ReqID: "e", Delete: []string{""}}},
	} {
		if _, err := command.Encode(kek, tc.cmd); err == nil {
			t.Errorf("%s: encoded", tc.desc)
		}
	}
}
