package backup

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestLabelValue(t *testing.T) {
	long := strings.Repeat("a", 100)
	tests := []struct {
		name, in string
		want     string // empty: only check validity
	}{
		{name: "a short name is kept", in: "nightly-20260101", want: "nightly-20260101"},
		{name: "exactly 63 characters is kept", in: strings.Repeat("b", 63), want: strings.Repeat("b", 63)},
		{name: "a long name is cut and hashed", in: long},
		{name: "a cut that would end on a dot or dash", in: strings.Repeat("a", 56) + ".-" + strings.Repeat("c", 20)},
		{name: "characters a label value cannot hold", in: "a/b:c"},
		{name: "only punctuation", in: "---"},
		{name: "empty stays empty", in: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := LabelValue(tt.in)
			if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
				t.Fatalf("LabelValue(%q) = %q, not a label value: %v", tt.in, got, errs)
			}
			if tt.want != "" || tt.in == "" {
				if got != tt.want {
					t.Errorf("LabelValue(%q) = %q, want %q", tt.in, got, tt.want)
				}
			}
		})
	}
	// Two long names that share their first 63 characters get different values.
	if a, b := LabelValue(long+"x"), LabelValue(long+"y"); a == b {
		t.Errorf("two different names got the same label value %q", a)
	}
}
