// Package words writes the small phrases the Propagation controller's
// stages put in status and Events: counts, lists of names, and messages
// cut to a size. It holds no state.
package words

import (
	"fmt"
	"strings"
)

// NameList lists names, at most 5 of them: "a, b, c, d, e and 2 more".
func NameList(names []string) string {
	const most = 5
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:most], ", "), len(names)-most)
}

// Plural is n followed by one when n is 1, else by many.
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Truncate cuts s to at most n bytes, on a rune boundary, ending with
// "..." when cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}
