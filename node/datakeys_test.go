package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
)

// fakeProgress is a store's progress; WaitApplied runs onWait (which may
// install the key the wait is for) and counts the waits.
type fakeProgress struct {
	applied, commit uint64
	waits           int
	onWait          func()
}

func (f *fakeProgress) AppliedIndex() uint64 { return f.applied }
func (f *fakeProgress) CommitIndex() uint64  { return f.commit }
func (f *fakeProgress) WaitApplied(ctx context.Context, index uint64) error {
	f.waits++
	if f.onWait != nil {
		f.onWait()
		f.applied = index
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func TestDataKeysWaitForUnknownKeyOnlyWhenBehind(t *testing.T) {
	now := time.Now()
	k, err := keyring.GenerateKey(now.Add(-time.Minute), 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issuer := keyring.NewRing(keyring.Options{})
	if err := issuer.Install(k); err != nil {
		t.Fatal(err)
	}
	purpose := keyring.Purpose("Cookie", "app", "aff")
	value, err := issuer.Seal(purpose, []byte("d1"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		desc      string
		applied   uint64
		commit    uint64
		applies   bool // the wait brings the key in
		wantWaits int
		wantErr   error
	}{
		{desc: "caught up: an unknown key fails at once, no wait", applied: 7, commit: 7, wantWaits: 0, wantErr: keyring.ErrUnknownKey},
		{desc: "behind: waits, and the key it applies opens the value", applied: 5, commit: 7, applies: true, wantWaits: 1},
		{desc: "behind but the key never comes: bounded wait, then unknown", applied: 5, commit: 7, wantWaits: 1, wantErr: keyring.ErrUnknownKey},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			ring := keyring.NewRing(keyring.Options{})
			fp := &fakeProgress{applied: c.applied, commit: c.commit}
			if c.applies {
				fp.onWait = func() { _ = ring.Install(k) }
			}
			dk := &dataKeys{ring: ring, st: fp}
			got, err := dk.Open(purpose, value)
			if fp.waits != c.wantWaits {
				t.Fatalf("waits %d, want %d", fp.waits, c.wantWaits)
			}
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil || string(got) != "d1" {
				t.Fatalf("Open = %q, %v", got, err)
			}
		})
	}
	// A value that fails for another reason (tampered) never waits.
	fp := &fakeProgress{applied: 1, commit: 9}
	dk := &dataKeys{ring: issuer, st: fp}
	if _, err := dk.Open(purpose, value[:len(value)-2]+"AA"); err == nil || fp.waits != 0 {
		t.Fatalf("tampered value: err %v, waits %d", err, fp.waits)
	}
}
