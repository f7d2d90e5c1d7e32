package cli

import (
	"io"
	"testing"

	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func TestErrorsLogNoStackTrace(t *testing.T) {
	var opts zap.Options
	if err := Parse(NewFlagSet("test", io.Discard, &opts), nil); err != nil {
		t.Fatal(err)
	}
	if opts.StacktraceLevel == nil || opts.StacktraceLevel.Enabled(zapcore.ErrorLevel) {
		t.Fatalf("stack traces are logged at error level")
	}
	if err := Parse(NewFlagSet("test", io.Discard, &opts), []string{"--zap-stacktrace-level=error"}); err != nil {
		t.Fatal(err)
	}
	if !opts.StacktraceLevel.Enabled(zapcore.ErrorLevel) {
		t.Fatalf("--zap-stacktrace-level=error does not bring them back")
	}
}
