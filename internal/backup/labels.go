package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// LabelValue turns a name (a backup's, which may be 253 characters long) into a valid label
// value: at most 63 characters of [A-Za-z0-9._-], beginning and ending with a letter or digit.
// A name that is a valid label value already is kept; any other keeps as much of itself as
// fits and ends with a short hash of the whole name, so two long names that share their first
// 57 characters still get different values.
func LabelValue(name string) string {
	if len(validation.IsValidLabelValue(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	hash := hex.EncodeToString(sum[:])[:5]
	cleaned := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '-'
	}, name)
	const keep = validation.LabelValueMaxLength - 1 - 5 // room for "-" and the hash
	if len(cleaned) > keep {
		cleaned = cleaned[:keep]
	}
	cleaned = strings.TrimLeft(strings.TrimRight(cleaned, "-_."), "-_.")
	if cleaned == "" {
		return hash
	}
	return cleaned + "-" + hash
}
