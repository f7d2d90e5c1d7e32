package fleet

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/go-logr/logr"
)

func TestSetGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for name, tc := range map[string]struct {
		gogc    string // "" for unset
		percent int
		want    int
	}{
		"the default":                {"", 0, DefaultGCPercent},
		"a chosen percent":           {"", 50, 50},
		"a negative percent":         {"", -1, 100},
		"GOGC set, the default":      {"100", 0, 100},
		"GOGC set, a chosen percent": {"100", 50, 100},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("GOGC", tc.gogc)
			if tc.gogc == "" {
				_ = os.Unsetenv("GOGC")
			}
			debug.SetGCPercent(100)
			setGCPercent(tc.percent, logr.Discard())
			if got := debug.SetGCPercent(100); got != tc.want {
				t.Fatalf("GC percent %d, want %d", got, tc.want)
			}
		})
	}
}
