package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/cairn-backup/cairn/internal/testenv"
)

// tourBlock is one ```sh block of a README section: the commands a reader types, and the
// output the README shows for them in a plain ``` block right after, if there is one.
type tourBlock struct {
	// Script is the block's text as written, heredocs included, without the fences.
	Script string
	// Output is the text of the plain ``` block that follows Script with no other fenced
	// block in between, or "".
	Output string
}

// tourBlocks returns, in order, the ```sh blocks of the README section whose heading is the
// line heading ("## A five-minute tour"): from that line to the next level-2 heading or the
// end. Fenced blocks in other languages are skipped; a plain ``` block is the output of the
// ```sh block before it.
func tourBlocks(readme, heading string) ([]tourBlock, error) {
	lines := strings.Split(readme, "\n")
	start := -1
	for i, line := range lines {
		if strings.TrimRight(line, " ") == heading {
			start = i + 1
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("no section %q", heading)
	}
	var blocks []tourBlock
	// lastSh is the ```sh block a following plain block belongs to: none after any other
	// fenced block.
	lastSh := -1
	for i := start; i < len(lines); i++ {
		line := lines[i]
		if strings.HasPrefix(line, "## ") {
			break
		}
		if !strings.HasPrefix(line, "```") {
			continue
		}
		lang := strings.TrimSpace(strings.TrimPrefix(line, "```"))
		end := i + 1
		for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("the fenced block at line %d is not closed", i+1)
		}
		text := strings.Join(lines[i+1:end], "\n")
		switch {
		case lang == "sh":
			blocks = append(blocks, tourBlock{Script: text})
			lastSh = len(blocks) - 1
		case lang == "" && lastSh >= 0:
			blocks[lastSh].Output = text
			lastSh = -1
		default:
			lastSh = -1
		}
		i = end
	}
	return blocks, nil
}

// tourLocalDirs are the state directories of the control planes a block starts itself
// (`LOCAL_DIR=DIR ... hack/local-up.sh up`).
func tourLocalDirs(script string) []string {
	var dirs []string
	for _, m := range regexp.MustCompile(`LOCAL_DIR=(\S+)[^\n]*(?:\\\n[^\n]*)*hack/local-up\.sh up`).FindAllStringSubmatch(script, -1) {
		dirs = append(dirs, m[1])
	}
	return dirs
}

func TestTourBlocks(t *testing.T) {
	const heading = "## Tour"
	tests := []struct {
		name   string
		readme string
		want   []tourBlock
		err    string
	}{{
		name:   "sh blocks in order, each with the plain block after it as its output",
		readme: "# X\n\n```sh\nintro\n```\n\n## Tour\n\nText.\n\n```sh\none\ntwo\n```\n\n```\nout\n```\n\nMore.\n\n```sh\nthree\n```\n",
		want:   []tourBlock{{Script: "one\ntwo", Output: "out"}, {Script: "three"}},
	}, {
		name:   "stops at the next level-2 heading, not at a level-3 one",
		readme: "## Tour\n```sh\na\n```\n### Part\n```sh\nb\n```\n## Documentation\n```sh\nc\n```\n",
		want:   []tourBlock{{Script: "a"}, {Script: "b"}},
	}, {
		name:   "blocks in other languages are skipped and end the output chain",
		readme: "## Tour\n```sh\na\n```\n```yaml\nkind: X\n```\n```\nnot a's output\n```\n",
		want:   []tourBlock{{Script: "a"}},
	}, {
		name:   "a heredoc stays intact, blank lines and indentation included",
		readme: "## Tour\n```sh\nkubectl apply -f - <<'EOF'\nspec:\n\n  ttl: 72h\nEOF\nkubectl get x   # shown\n```\n",
		want:   []tourBlock{{Script: "kubectl apply -f - <<'EOF'\nspec:\n\n  ttl: 72h\nEOF\nkubectl get x   # shown"}},
	}, {
		name:   "no such section",
		readme: "## Other\n```sh\na\n```\n",
		err:    `no section "## Tour"`,
	}, {
		name:   "an unclosed block",
		readme: "## Tour\n\n```sh\na\n",
		err:    "the fenced block at line 3 is not closed",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tourBlocks(tt.readme, heading)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestTourLocalDirs(t *testing.T) {
	tests := []struct {
		name   string
		script string
		want   []string
	}{
		{"none", "kubectl get backups", nil},
		{"one line", "LOCAL_DIR=bin/local-b hack/local-up.sh up\nbin/manager &", []string{"bin/local-b"}},
		{"continued over lines", "LOCAL_DIR=bin/local-b LOCAL_API_PORT=1 \\\n  LOCAL_ETCD_PORT=2 hack/local-up.sh up", []string{"bin/local-b"}},
		{"down is not a start", "LOCAL_DIR=bin/local-b hack/local-up.sh down", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tourLocalDirs(tt.script); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestReadmeTourIsPartOfTheTour: every ```sh block of the README's tour, with the output the
// README shows for it, is a block of docs/tour.md, word for word and in the same order, so the
// tour spec (readme_test.go), which runs docs/tour.md, runs the README's blocks as written.
func TestReadmeTourIsPartOfTheTour(t *testing.T) {
	read := func(file, heading string) []tourBlock {
		t.Helper()
		text, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), file))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := tourBlocks(string(text), heading)
		if err != nil || len(blocks) == 0 {
			t.Fatalf("%s, %q: %d blocks, %v", file, heading, len(blocks), err)
		}
		return blocks
	}
	if missing := notInOrder(read("README.md", readmeHeading), read(tourFile, tourHeading)); missing != nil {
		t.Fatalf("this block of the README's tour is not the next one of %s's (change both alike):\n%s\n%s", tourFile, missing.Script, missing.Output)
	}
}

// notInOrder is the first of blocks that is not found, equal, in tour after the one before it;
// nil when blocks is a subsequence of tour.
func notInOrder(blocks, tour []tourBlock) *tourBlock {
	next := 0
	for i := range blocks {
		for next < len(tour) && tour[next] != blocks[i] {
			next++
		}
		if next == len(tour) {
			return &blocks[i]
		}
		next++
	}
	return nil
}
