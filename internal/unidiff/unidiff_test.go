package unidiff

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestUnifiedDiffAsDiffWritesIt(t *testing.T) {
	lines := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	for _, tc := range []struct {
		desc, a, b, want string
	}{
		{"the same", "a\nb", "a\nb", ""},
		{"one line changed, with context", "1\n2\n3\n4\n5\n6\n7\n8", "1\n2\n3\n4\nfive\n6\n7\n8",
			"--- A\n+++ B\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"},
		{"changes far apart are two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12", "one\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\ntwelve",
			"--- A\n+++ B\n@@ -1,4 +1,4 @@\n-1\n+one\n 2\n 3\n 4\n@@ -9,4 +9,4 @@\n 9\n 10\n 11\n-12\n+twelve\n"},
		{"changes close together are one hunk", "1\n2\n3\n4\n5\n6\n7", "one\n2\n3\n4\n5\n6\nseven",
			"--- A\n+++ B\n@@ -1,7 +1,7 @@\n-1\n+one\n 2\n 3\n 4\n 5\n 6\n-7\n+seven\n"},
		{"six unchanged lines between changes: one hunk, as diff -u", "1\n2\n3\n4\n5\n6\n7\n8", "one\n2\n3\n4\n5\n6\n7\neight",
			"--- A\n+++ B\n@@ -1,8 +1,8 @@\n-1\n+one\n 2\n 3\n 4\n 5\n 6\n 7\n-8\n+eight\n"},
		{"from nothing", "", "x\ny", "--- A\n+++ B\n@@ -0,0 +1,2 @@\n+x\n+y\n"},
		{"to nothing", "x", "", "--- A\n+++ B\n@@ -1 +0,0 @@\n-x\n"},
		{"a line added in the middle", "a\nb\nc", "a\nb\nnew\nc", "--- A\n+++ B\n@@ -1,3 +1,4 @@\n a\n b\n+new\n c\n"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			if got := Diff("A", "B", lines(tc.a), lines(tc.b), 3); got != tc.want {
				t.Fatalf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestEditScriptIsShortest: on random small inputs the script turns a into
// b and keeps as many lines as the longest common subsequence.
func TestEditScriptIsShortest(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	gen := func() []string {
		out := make([]string, r.IntN(12))
		for i := range out {
			out[i] = fmt.Sprint(r.IntN(4))
		}
		return out
	}
	for range 2000 {
		a, b := gen(), gen()
		checkScript(t, a, b, editScript(a, b), lcs(a, b))
	}
}

// TestEditScriptPastTheBound: two long inputs with nothing in common are
// a correct diff too (all removed, all added).
func TestEditScriptPastTheBound(t *testing.T) {
	var a, b []string
	for i := range 3 * maxEdits {
		a, b = append(a, fmt.Sprint("a", i)), append(b, fmt.Sprint("b", i))
	}
	b[0] = a[0]
	es := editScript(a, b)
	checkScript(t, a, b, es, -1)
}

func checkScript(t *testing.T, a, b []string, es []lineEdit, want int) {
	t.Helper()
	var gotA, gotB []string
	kept := 0
	for _, e := range es {
		if e.op != '+' {
			gotA = append(gotA, e.text)
		}
		if e.op != '-' {
			gotB = append(gotB, e.text)
		}
		if e.op == ' ' {
			kept++
		}
	}
	if !slices.Equal(gotA, a) || !slices.Equal(gotB, b) {
		t.Fatalf("%q -> %q: the script gives %q -> %q", a, b, gotA, gotB)
	}
	if want >= 0 && kept != want {
		t.Fatalf("%q -> %q: keeps %d lines, the longest common subsequence has %d", a, b, kept, want)
	}
}

func lcs(a, b []string) int {
	dp := make([][]int, len(a)+1)
	for i := range dp {
		dp[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	return dp[0][0]
}
