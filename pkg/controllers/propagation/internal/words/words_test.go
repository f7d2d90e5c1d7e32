package words

import "testing"

func TestPhrases(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Plural(1, "member", "members"), "1 member"},
		{Plural(0, "member", "members"), "0 members"},
		{NameList([]string{"a", "b"}), "a, b"},
		{NameList([]string{"a", "b", "c", "d", "e", "f", "g"}), "a, b, c, d, e and 2 more"},
		{Truncate("short", 10), "short"},
		{Truncate("héllo wörld", 6), "hé..."},
		{Truncate("héllo", 5), "h..."}, // no half rune
		{Truncate("abcdefghij", 8), "abcde..."},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
