package unidiff

import (
	"fmt"
	"strings"
)

// lineEdit is one line of an edit script: ' ' kept, '-' only in a, '+' only in b.
type lineEdit struct {
	op   byte
	text string
}

// maxEdits bounds the search for the shortest edit script: past it (two
// configurations with little in common) the differing middle is shown as
// removed whole and added whole, still a correct diff.
const maxEdits = 2000

// editScript is a shortest edit script from a to b (Myers' algorithm),
// after taking off the lines both start and end with.
func editScript(a, b []string) []lineEdit {
	var out []lineEdit
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		out = append(out, lineEdit{' ', a[pre]})
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	out = append(out, myers(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	for _, l := range a[len(a)-suf:] {
		out = append(out, lineEdit{' ', l})
	}
	return out
}

func myers(a, b []string) []lineEdit {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return replaceAll(a, b)
	}
	limit := min(n+m, maxEdits)
	off := limit + 1
	v := make([]int, 2*limit+3)
	// trace[d] holds v[k] for k in [-d-1, d+1] as it was before step d.
	var trace [][]int
	found := false
	for d := 0; d <= limit && !found; d++ {
		trace = append(trace, append([]int(nil), v[off-d-1:off+d+2]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[off+k] = x
			if x >= n && y >= m {
				found = true
				break
			}
		}
	}
	if !found {
		return replaceAll(a, b)
	}
	var rev []lineEdit
	x, y := n, m
	for d := len(trace) - 1; d >= 0; d-- {
		w := trace[d]
		at := func(k int) int { return w[k+d+1] }
		k := x - y
		prevK := k - 1
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			prevK = k + 1
		}
		prevX := at(prevK)
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			rev = append(rev, lineEdit{' ', a[x-1]})
			x, y = x-1, y-1
		}
		if d > 0 {
			if x == prevX {
				rev = append(rev, lineEdit{'+', b[prevY]})
			} else {
				rev = append(rev, lineEdit{'-', a[prevX]})
			}
		}
		x, y = prevX, prevY
	}
	out := make([]lineEdit, len(rev))
	for i, e := range rev {
		out[len(rev)-1-i] = e
	}
	return out
}

func replaceAll(a, b []string) []lineEdit {
	out := make([]lineEdit, 0, len(a)+len(b))
	for _, l := range a {
		out = append(out, lineEdit{'-', l})
	}
	for _, l := range b {
		out = append(out, lineEdit{'+', l})
	}
	return out
}

// Diff is diff -u's output from a (named aName) to b, with context lines
// around each change; "" when they are the same.
func Diff(aName, bName string, a, b []string, context int) string {
	edits := editScript(a, b)
	var changed []int
	for i, e := range edits {
		if e.op != ' ' {
			changed = append(changed, i)
		}
	}
	if len(changed) == 0 {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", aName, bName)
	// aLine[i], bLine[i]: the lines of a and b before edit i.
	aLine, bLine := make([]int, len(edits)+1), make([]int, len(edits)+1)
	for i, e := range edits {
		aLine[i+1], bLine[i+1] = aLine[i], bLine[i]
		if e.op != '+' {
			aLine[i+1]++
		}
		if e.op != '-' {
			bLine[i+1]++
		}
	}
	for i := 0; i < len(changed); {
		start := max(changed[i]-context, 0)
		end := changed[i] + 1
		j := i + 1
		for j < len(changed) && changed[j]-end <= 2*context {
			end = changed[j] + 1
			j++
		}
		end = min(end+context, len(edits))
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(aLine[start], aLine[end]-aLine[start]), hunkRange(bLine[start], bLine[end]-bLine[start]))
		for _, e := range edits[start:end] {
			sb.WriteByte(e.op)
			sb.WriteString(e.text)
			sb.WriteByte('\n')
		}
		i = j
	}
	return sb.String()
}

// hunkRange is a hunk's range as diff -u writes it: the first line
// (1-based) and the count, the count left out when 1, and the line before
// when there is none.
func hunkRange(before, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", before)
	case 1:
		return fmt.Sprint(before + 1)
	}
	return fmt.Sprintf("%d,%d", before+1, n)
}
