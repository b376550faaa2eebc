package trie

import (
	"testing"
	"unicode"
)

// TestOnlyTwoLettersFoldToASCII checks the premise of foldsToASCII: no
// other rune's case-folding orbit reaches an ASCII letter.
func TestOnlyTwoLettersFoldToASCII(t *testing.T) {
	for r := rune(0x80); r <= unicode.MaxRune; r++ {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < 0x80 && r != 0x17f && r != 0x212a {
				t.Errorf("%U folds to ASCII %q", r, f)
			}
		}
	}
}

func TestNormalizeRefusesLettersFoldingToASCII(t *testing.T) {
	for _, p := range []string{"/v1/\u017fecret", "/v1/%C5%BFecret", "/\u212aey", "/%E2%84%AAey"} {
		if _, err := Normalize(p); err != ErrFoldsToASCII {
			t.Errorf("Normalize(%q): got %v, want ErrFoldsToASCII", p, err)
		}
	}
	for _, p := range []string{"/v1/%C3%A9t%C3%A9", "/v1/\u00e9t\u00e9", "/v1/Secret"} {
		if _, err := Normalize(p); err != nil {
			t.Errorf("Normalize(%q): got %v, want no error", p, err)
		}
	}
}
