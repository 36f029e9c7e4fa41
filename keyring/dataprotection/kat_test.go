package dataprotection

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"testing"
)

// The known-answer vectors in this file are copied as data from ASP.NET
// Core's own Data Protection tests (dotnet/aspnetcore, directory
// src/DataProtection/DataProtection/test/Microsoft.AspNetCore.DataProtection.Tests);
// each test names its source file. They were computed by ASP.NET, not by the
// code under test.

// sequentialRandom is ASP.NET's SequentialGenRandom (SequentialGenRandom.cs
// in the same test project): bytes 0, 1, 2, ... in order.
type sequentialRandom struct{ next byte }

func (s *sequentialRandom) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = s.next
		s.next++
	}
	return len(p), nil
}

func b64d(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("bad vector %q: %v", s, err)
	}
	return b
}

// Source: SP800_108/SP800_108Tests.cs (DeriveKeyWithContextHeader_Normal_Managed,
// DeriveKeyWithContextHeader_LongKey_Managed, DeriveKeys_EmptyKdk_Managed_ShouldSucceed).
func TestKDFMatchesASPNETVectors(t *testing.T) {
	longKDK := make([]byte, 50000)
	for i := range longKDK {
		longKDK[i] = byte(i)
	}
	cases := []struct {
		desc string
		kdk  []byte
		// label, contextHeader, context empty when nil
		label, contextHeader, context string
		n                             int
		want                          string
	}{
		{"normal key, one byte short of a PRF block", []byte("kdk"), "label", "contextHeader", "context", 63,
			"V47WmHzPSkdC2vkLAomIjCzZlDOAetll3yJLcSvon7LJFjJpEN+KnSNp+gIpeydKMsENkflbrIZ/3s6GkEaH"},
		{"normal key, exactly one PRF block", []byte("kdk"), "label", "contextHeader", "context", 64,
			"mVaFM4deXLl610CmnCteNzxgbM/VkmKznAlPauHcDBn0le06uOjAKLHx0LfoU2/Ttq9nd78Y6Nk6wArmdwJgJg=="},
		{"normal key, one byte into a second PRF block", []byte("kdk"), "label", "contextHeader", "context", 65,
			"GaHPeqdUxriFpjRtkYQYWr5/iqneD/+hPhVJQt4rXblxSpB1UUqGqL00DMU/FJkX0iMCfqUjQXtXyfks+p++Ev4="},
		{"50000-byte key, 63 bytes", longKDK, "label", "contextHeader", "context", 63,
			"rt2hM6kkQ8hAXmkHx0TU4o3Q+S7fie6b3S1LAq107k++P9v8uSYA2G+WX3pJf9ZkpYrTKD7WUIoLkgA1R9lk"},
		{"50000-byte key, 64 bytes", longKDK, "label", "contextHeader", "context", 64,
			"RKiXmHSrWq5gkiRSyNZWNJrMR0jDyYHJMt9odOayRAE5wLSX2caINpQmfzTH7voJQi3tbn5MmD//dcspghfBiw=="},
		{"50000-byte key, 65 bytes", longKDK, "label", "contextHeader", "context", 65,
			"KedXO0zAIZ3AfnPqY1NnXxpC3HDHIxefG4bwD3g6nWYEc5+q7pjbam71Yqj0zgHMNC9Z7BX3wS1/tajFocRWZUk="},
		{"empty KDK, AES-256 + HMACSHA256 subkeys (the context header's)", nil, "", "", "", 64,
			"fHGMWaDLmoncLsEKuKbZo8T+73paNohDeb5O7BSxbC8Gus8d/mUpa/9w2ss65OHlmFw1VZhIXzr5swMYVRndRw=="},
		{"empty KDK, AES-256 + HMACSHA512 subkeys", nil, "", "", "", 96,
			"iXd0KuWopclbxtWf9dO8fnerBqLJvndOUs74pTcj7Ck8Ctsvz4QttXkCY1DPd4aDbOE/CCU8/bIQtzoU1Xu3ZQ1pV0qEZmzFll+Vpf+q7av7AGEqwh56a+NPt6gxC5CP"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			out := make([]byte, c.n)
			deriveKeys(c.kdk, []byte(c.label), []byte(c.contextHeader), []byte(c.context), out)
			if got := base64.StdEncoding.EncodeToString(out); got != c.want {
				t.Fatalf("derived %s, want %s", got, c.want)
			}
		})
	}
}

// Source: Managed/ManagedAuthenticatedEncryptorTests.cs (Encrypt_KnownKey) and
// Cng/CbcAuthenticatedEncryptorTests.cs (Encrypt_KnownKey, same bytes between
// a 3-byte pre-buffer and a 4-byte post-buffer, stripped here).
func TestCBCHMACEncryptMatchesASPNETKnownKey(t *testing.T) {
	e, err := newCBCHMAC([]byte("master key"), 256, 256)
	if err != nil {
		t.Fatal(err)
	}
	plaintext := []byte{0, 1, 2, 3, 4, 5, 6, 7}[2:5]
	aad := []byte{7, 6, 5, 4, 3, 2, 1, 0}[1:5]
	got, err := e.encrypt(&sequentialRandom{}, plaintext, aad)
	if err != nil {
		t.Fatal(err)
	}
	const want = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+36j4yWJOjBgOJxmYDYwhLnYqFxw+9mNh/cudyPrWmJmw4d/dmGaLJLLut2udiAAA="
	if s := base64.StdEncoding.EncodeToString(got); s != want {
		t.Fatalf("managed encryptor: got %s\nwant %s", s, want)
	}
	cng := b64d(t, "AAAAAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+36j4yWJOjBgOJxmYDYwhLnYqFxw+9mNh/cudyPrWmJmw4d/dmGaLJLLut2udiAAAAAAAA")
	if !bytes.Equal(cng[3:len(cng)-4], got) {
		t.Fatalf("CNG CBC vector differs from ours")
	}
	pt, err := e.decrypt(got, aad)
	if err != nil || !bytes.Equal(pt, plaintext) {
		t.Fatalf("decrypt of the vector: %x, %v", pt, err)
	}
}

// Source: Cng/GcmAuthenticatedEncryptorTests.cs (Encrypt_KnownKey: AES-128-GCM,
// 3-byte pre-buffer and 4-byte post-buffer stripped here).
func TestGCMEncryptMatchesASPNETKnownKey(t *testing.T) {
	e, err := newGCM([]byte("master key"), 128)
	if err != nil {
		t.Fatal(err)
	}
	plaintext := []byte{0, 1, 2, 3, 4, 5, 6, 7}[2:5]
	aad := []byte{7, 6, 5, 4, 3, 2, 1, 0}[1:5]
	got, err := e.encrypt(&sequentialRandom{}, plaintext, aad)
	if err != nil {
		t.Fatal(err)
	}
	want := b64d(t, "AAAAAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaG0O2kY0NZtmh2UQtXY5B2jlgnOgAAAAA")
	want = want[3 : len(want)-4]
	if !bytes.Equal(got, want) {
		t.Fatalf("got  %x\nwant %x", got, want)
	}
	pt, err := e.decrypt(got, aad)
	if err != nil || !bytes.Equal(pt, plaintext) {
		t.Fatalf("decrypt of the vector: %x, %v", pt, err)
	}
}

// Source: the precomputed AES_{128,192,256}_GCM_Header constants of
// src/DataProtection/DataProtection/src/Managed/AesGcmAuthenticatedEncryptor.cs.
func TestGCMContextHeaderMatchesASPNET(t *testing.T) {
	cases := []struct {
		desc string
		bits int
		want string
	}{
		{"AES-128-GCM", 128, "0001000000100000000C0000001000000010957C50FF692E388B9AD5C7689E4B9E2B"},
		{"AES-192-GCM", 192, "0001000000180000000C00000010000000100DAA013A950ADA2B798F5FF272FAD363"},
		{"AES-256-GCM", 256, "0001000000200000000C0000001000000010E7DCCE66DF855A323A6BB7BD7A59BE45"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			e, err := newGCM(nil, c.bits)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := hex.DecodeString(c.want)
			if !bytes.Equal(e.header, want) {
				t.Fatalf("header %X, want %s", e.header, c.want)
			}
		})
	}
}

// Source: KeyManagement/AdditionalAuthenticatedDataTemplateTests.cs
// (BuildAadTemplateBytes with an all-zero key id).
func TestAADMatchesASPNETTemplate(t *testing.T) {
	purposes := []string{
		"my sample string",
		"©®±µ¶",
		"my other sample string",
		"CfDJ8H5oH_fp1QNBmvs-OWXxsVoV30hrXeI4-PI4p1VZytjsgd0DTstMdtTZbFtm2dKHvsBlDCv7TiEWKztZf8fb48pUgBgUE2SeYV3eOUXvSfNWU0D8SmHLy5KEnwKKkZKqudDhCnjQSIU7mhDliJJN1e4",
		".",
	}
	const want = "CfDJ8AAAAAAAAAAAAAAAAAAAAAAAAAAFEG15IHNhbXBsZSBzdHJpbmcKwqnCrsKxwrXCthZteSBvdGhlciBzYW1wbGUgc3RyaW5nmwFDZkRKOEg1b0hfZnAxUU5CbXZzLU9XWHhzVm9WMzBoclhlSTQtUEk0cDFWWnl0anNnZDBEVHN0TWR0VFpiRnRtMmRLSHZzQmxEQ3Y3VGlFV0t6dFpmOGZiNDhwVWdCZ1VFMlNlWVYzZU9VWHZTZk5XVTBEOFNtSEx5NUtFbndLS2taS3F1ZERoQ25qUVNJVTdtaERsaUpKTjFlNAEu"
	got := aadFor(aadTemplate(purposes), KeyID{})
	if s := base64.StdEncoding.EncodeToString(got); s != want {
		t.Fatalf("aad %s\nwant %s", s, want)
	}
}
