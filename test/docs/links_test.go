package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the repository's top directory, seen from this package.
const repoRoot = "../.."

var (
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLink    = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*(\S+)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// slug is the anchor GitHub gives a heading: lower case, markup and
// punctuation dropped, spaces made hyphens.
func slug(h string) string {
	h = strings.ToLower(h)
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_':
			b.WriteRune(r)
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r > 127 && isLetter(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isLetter(r rune) bool {
	return strings.ContainsRune("àáâäçèéêëìíîïñòóôöùúûüß", r) || r >= 0x370
}

// doc is one Markdown file: its links (outside code) and its anchors.
type doc struct {
	links   []link
	anchors map[string]bool
}

type link struct {
	line   int
	target string
}

func parse(text string) doc {
	d := doc{anchors: map[string]bool{}}
	seen := map[string]int{}
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		trim := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trim, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~") {
			fence = trim[:3]
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			s := slug(m[2])
			if n := seen[s]; n > 0 {
				d.anchors[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				d.anchors[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			d.anchors[m[1]] = true
		}
		plain := codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(plain, -1) {
			d.links = append(d.links, link{i + 1, m[1]})
		}
		if m := refLink.FindStringSubmatch(plain); m != nil {
			d.links = append(d.links, link{i + 1, m[1]})
		}
	}
	return d
}

func TestSlug(t *testing.T) {
	// Anchors GitHub gives these headings (as linked from this repository's
	// docs and checked on github.com).
	for _, tc := range []struct{ heading, want string }{
		{"Web application firewall (`proxy/waf`)", "web-application-firewall-proxywaf"},
		{"Moving live sessions (Data Protection)", "moving-live-sessions-data-protection"},
		{"Rotate the cluster secret", "rotate-the-cluster-secret"},
		{"Race: tether, HAProxy, nginx, Caddy, stdlib (`make bench-race`)", "race-tether-haproxy-nginx-caddy-stdlib-make-bench-race"},
		{"Raft indexes: read your writes on any node", "raft-indexes-read-your-writes-on-any-node"},
		{"The agent's command line", "the-agents-command-line"},
	} {
		if got := slug(tc.heading); got != tc.want {
			t.Errorf("slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestParseSkipsCode(t *testing.T) {
	d := parse("# A b\n\n[x](y.md#a-b) `[no](z.md)`\n```\n[no](w.md)\n```\n## A b\n[r]: ref.md\n")
	var got []string
	for _, l := range d.links {
		got = append(got, l.target)
	}
	if strings.Join(got, " ") != "y.md#a-b ref.md" {
		t.Fatalf("links %q, want y.md#a-b and ref.md", got)
	}
	if !d.anchors["a-b"] || !d.anchors["a-b-1"] {
		t.Fatalf("anchors %v, want a-b and a-b-1", d.anchors)
	}
}

// TestMarkdownLinksResolve: every relative link in every *.md file names a
// file or directory that exists, and every #anchor a heading of its file.
func TestMarkdownLinksResolve(t *testing.T) {
	docs := map[string]doc{}
	err := filepath.WalkDir(repoRoot, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (e.Name() == ".git" || e.Name() == "node_modules" || (e.Name() == "bin" && filepath.Dir(path) == repoRoot)) {
			return filepath.SkipDir
		}
		if !e.IsDir() && strings.HasSuffix(path, ".md") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			docs[filepath.Clean(path)] = parse(string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := docs[filepath.Join(repoRoot, "README.md")]; !ok {
		t.Fatal("README.md not found: the test runs from test/docs")
	}
	checked := 0
	for path, d := range docs {
		for _, l := range d.links {
			target := l.target
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				if strings.HasPrefix(file, "/") {
					t.Errorf("%s:%d: %s: an absolute path does not resolve on GitHub and in a clone alike; make it relative", path, l.line, target)
					continue
				}
				dest = filepath.Clean(filepath.Join(filepath.Dir(path), file))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: %s: no such file or directory", path, l.line, target)
					continue
				}
			}
			checked++
			if anchor == "" {
				continue
			}
			td, ok := docs[dest]
			if !ok {
				t.Errorf("%s:%d: %s: an anchor into a file that is not Markdown", path, l.line, target)
				continue
			}
			if !td.anchors[anchor] {
				t.Errorf("%s:%d: %s: %s has no heading with anchor #%s", path, l.line, target, dest, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the parser finds nothing")
	}
}
