package phases

import (
	"fmt"
	"strings"
)

// Markdown is the table as docs/architecture.md shows it: one row per state, with the
// columns phase, meaning, owner and "may move to".
func (t *Table) Markdown() string {
	var b strings.Builder
	b.WriteString("| phase | meaning | owner | may move to |\n|---|---|---|---|\n")
	for _, s := range t.States {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.shownPhases(s), s.Meaning, orDash(string(s.Owner)), shownArrows(s))
	}
	return b.String()
}

func (t *Table) shownPhases(s State) string {
	if s.Shown != "" {
		return s.Shown
	}
	var out []string
	for _, p := range s.Phases {
		if p == t.Initial {
			out = append(out, "`\"\"`")
		}
		out = append(out, "`"+string(p)+"`")
	}
	return strings.Join(out, ", ")
}

func shownArrows(s State) string {
	var out []string
	for _, a := range s.Arrows {
		shown := "`" + string(a.To) + "`"
		if a.When != "" {
			shown += " (" + a.When + ")"
		}
		out = append(out, shown)
	}
	if s.Ends != "" {
		out = append(out, s.Ends)
	}
	return orDash(strings.Join(out, ", "))
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// Markers around a generated table in a Markdown file: the table of kind K goes between
// BeginMarker(K) and EndMarker(K), each alone on its line.
func BeginMarker(k Kind) string {
	return fmt.Sprintf("<!-- BEGIN phase table %s: generated from internal/phases by 'make docs'; do not edit -->", k)
}

// EndMarker ends a generated table (BeginMarker).
func EndMarker(k Kind) string { return fmt.Sprintf("<!-- END phase table %s -->", k) }

// ReplaceTables rewrites, in the Markdown document doc, what stands between each pair of
// markers with the table of their kind. A kind whose markers are missing, repeated or out of
// order is an error; tables may be left out of doc by omitting their markers, except the
// tables of required kinds.
func ReplaceTables(doc string, tables []*Table, required ...Kind) (string, error) {
	for _, t := range tables {
		begin, end := BeginMarker(t.Kind)+"\n", "\n"+EndMarker(t.Kind)
		nb, ne := strings.Count(doc, begin), strings.Count(doc, end)
		switch {
		case nb == 0 && ne == 0:
			for _, k := range required {
				if k == t.Kind {
					return "", fmt.Errorf("no markers for the %s table (%q)", t.Kind, BeginMarker(t.Kind))
				}
			}
			continue
		case nb != 1 || ne != 1:
			return "", fmt.Errorf("the markers of the %s table must each be there once, alone on a line: found %d begin and %d end", t.Kind, nb, ne)
		}
		i := strings.Index(doc, begin) + len(begin)
		j := strings.Index(doc, end)
		if j < i-1 {
			return "", fmt.Errorf("the end marker of the %s table comes before its begin marker", t.Kind)
		}
		doc = doc[:i] + strings.TrimSuffix(t.Markdown(), "\n") + doc[j:]
	}
	return doc, nil
}
