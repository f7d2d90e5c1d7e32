package propagation

import (
	"fmt"
	"strings"
)

// nameList lists names, at most 5 of them: "a, b, c, d, e and 2 more".
func nameList(names []string) string {
	const most = 5
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:most], ", "), len(names)-most)
}

// plural is n followed by one when n is 1, else by many.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
