// Package cli holds what the project's commands share: flag parsing that
// tells usage errors apart, and the logger setup.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"strings"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// ErrUsage is returned for bad usage, which the command has explained.
var ErrUsage = errors.New("bad usage")

// NewFlagSet returns a flag set named name that returns its errors, and
// binds the zap logger's flags to zapOpts. Stack traces are logged for
// panics only: an error line says what failed and where already.
func NewFlagSet(name string, stderr io.Writer, zapOpts *zap.Options) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	bindZapFlags(fs, zapOpts)
	return fs
}

// BindZapFlags binds the zap logger's flags to zapOpts on fs, a pflag set,
// with stack traces for panics only, as NewFlagSet does.
func BindZapFlags(fs *pflag.FlagSet, zapOpts *zap.Options) {
	goFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	bindZapFlags(goFlags, zapOpts)
	fs.AddGoFlagSet(goFlags)
}

func bindZapFlags(fs *flag.FlagSet, zapOpts *zap.Options) {
	zapOpts.BindFlags(fs)
	if err := fs.Set("zap-stacktrace-level", "panic"); err != nil {
		panic(err) // the flag is controller-runtime's own
	}
}

// Parse parses args into fs and refuses positional arguments. The flag
// package has already printed what was wrong, with the usage.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return ErrUsage
	}
	if fs.NArg() > 0 {
		return UsageErrorf(fs, "unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// UsageErrorf prints a usage error and where to find the usage.
func UsageErrorf(fs *flag.FlagSet, format string, args ...any) error {
	fmt.Fprintf(fs.Output(), "%s: %s\nRun \"%s -h\" for usage.\n", fs.Name(), fmt.Sprintf(format, args...), fs.Name())
	return ErrUsage
}

// SetupLogging makes the logger zapOpts describe controller-runtime's and
// klog's logger, and returns it. The standard library's log package goes to
// it too: net/http's servers write their errors there (a plain-HTTP scrape
// of the HTTPS metrics port: "http: TLS handshake error"), and
// controller-runtime's metrics and health servers set no ErrorLog.
func SetupLogging(zapOpts *zap.Options) logr.Logger {
	log := zap.New(zap.UseFlagOptions(zapOpts))
	ctrl.SetLogger(log)
	klog.SetLogger(log)
	stdlog.SetFlags(0)
	stdlog.SetOutput(stdlogWriter{log.WithName("stdlog")})
	return log
}

// stdlogWriter logs each entry of the standard library's log package, which
// writes one entry per call, at info level.
type stdlogWriter struct{ log logr.Logger }

func (w stdlogWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// Exit codes of the project's commands.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// ExitCode returns the exit code for what command returned, and prints an
// error that is not about usage, which the command has already explained.
func ExitCode(command string, err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, ErrUsage):
		return ExitUsage
	default:
		fmt.Fprintf(stderr, "%s: %v\n", command, err)
		return ExitError
	}
}
