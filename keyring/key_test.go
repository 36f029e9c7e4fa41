package keyring

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestKeyStateFollowsTime(t *testing.T) {
	k := mkKey("a", 1*day, 10*day)
	revoked := k
	revoked.Revoked = true
	cases := []struct {
		desc string
		key  Key
		at   time.Time
		want State
	}{
		{"installed before activation", k, t0, Installed},
		{"active at activation instant", k, t0.Add(1 * day), Active},
		{"active just before expiry", k, t0.Add(10*day - time.Nanosecond), Active},
		{"expired at expiry instant", k, t0.Add(10 * day), Expired},
		{"revoked wins over every time", revoked, t0.Add(5 * day), Revoked},
		{"revoked before activation", revoked, t0, Revoked},
	}
	for _, c := range cases {
		if got := c.key.State(c.at); got != c.want {
			t.Errorf("%s: State = %s, want %s", c.desc, got, c.want)
		}
	}
}

func TestStateNamesMatchSpec(t *testing.T) {
	for _, c := range []struct {
		s    State
		want string
	}{{Installed, "installed"}, {Active, "active"}, {Expired, "expired"}, {Revoked, "revoked"}} {
		b, err := json.Marshal(c.s)
		if err != nil || string(b) != `"`+c.want+`"` {
			t.Errorf("json(%d) = %s, %v; want %q", c.s, b, err, c.want)
		}
		var back State
		if err := json.Unmarshal(b, &back); err != nil || back != c.s {
			t.Errorf("round trip %s = %v, %v", c.want, back, err)
		}
	}
}

func TestMetadataJSONFieldNames(t *testing.T) {
	b, err := json.Marshal(mkKey("abc", 0, day).Metadata(t0))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"id", "created", "activates", "expires", "state"} {
		if _, ok := m[f]; !ok {
			t.Errorf("metadata JSON %s lacks %q", b, f)
		}
	}
	if len(m) != 5 {
		t.Errorf("metadata JSON %s has extra fields", b)
	}
	if m["state"] != "active" {
		t.Errorf("state = %v, want active", m["state"])
	}
}

func TestGenerateKey(t *testing.T) {
	now := time.Now()
	k, err := GenerateKey(now, time.Hour, 90*day)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.validate(); err != nil {
		t.Fatalf("generated key invalid: %v", err)
	}
	if len(k.ID) != 16 || len(k.Material) != KeySize {
		t.Errorf("id %q, material %d bytes", k.ID, len(k.Material))
	}
	if !k.Created.Equal(now) || !k.Activates.Equal(now.Add(time.Hour)) || !k.Expires.Equal(now.Add(time.Hour+90*day)) {
		t.Errorf("times: %v", k)
	}
	if k.Created.Location() != time.UTC || k.Created != k.Created.Round(0) {
		t.Errorf("created not canonical (UTC, no monotonic reading): %#v", k.Created)
	}
	k2, _ := GenerateKey(now, 0, day)
	if k2.ID == k.ID || string(k2.Material) == string(k.Material) {
		t.Error("two generated keys share id or material")
	}
	for _, c := range []struct {
		desc            string
		delay, lifetime time.Duration
		now             time.Time
		want            string
	}{
		{"negative activation delay", -time.Second, day, now, "activation delay"},
		{"zero lifetime", 0, 0, now, "lifetime"},
		{"zero time", 0, day, time.Time{}, "current time"},
	} {
		if _, err := GenerateKey(c.now, c.delay, c.lifetime); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want mention of %q", c.desc, err, c.want)
		}
	}
}

func TestInstallRejectsInvalidKeys(t *testing.T) {
	good := mkKey("good", 0, day)
	mod := func(f func(*Key)) Key { k := good; f(&k); return k }
	cases := []struct {
		desc string
		key  Key
		want string
	}{
		{"empty id", mod(func(k *Key) { k.ID = "" }), "key id"},
		{"id with slash", mod(func(k *Key) { k.ID = "a/b" }), "key id"},
		{"id too long", mod(func(k *Key) { k.ID = strings.Repeat("a", MaxIDLen+1) }), "key id"},
		{"short material", mod(func(k *Key) { k.Material = k.Material[:16] }), "material is 16 bytes"},
		{"zero activation", mod(func(k *Key) { k.Activates = time.Time{} }), "required"},
		{"expiry not after activation", mod(func(k *Key) { k.Expires = k.Activates }), "not after"},
	}
	for _, c := range cases {
		err := NewRing(Options{}).Install(c.key)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want mention of %q", c.desc, err, c.want)
		}
	}
}
