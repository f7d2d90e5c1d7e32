package cli

import (
	"context"
	"encoding/json"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/internal/syncbuffer"
)

// TestPlainHTTPScrapeLogsJSON scrapes an HTTPS metrics server, built as the
// manager builds it, over plain HTTP: the server's "TLS handshake error"
// is one JSON entry of the logger, not a line of its own.
func TestPlainHTTPScrapeLogsJSON(t *testing.T) {
	var out syncbuffer.Buffer
	SetupLogging(&zap.Options{DestWriter: &out})
	t.Cleanup(func() {
		stdlog.SetOutput(os.Stderr)
		stdlog.SetFlags(stdlog.LstdFlags)
	})

	addr := freeAddress(t)
	server, err := metricsserver.NewServer(metricsserver.Options{BindAddress: addr, SecureServing: true, CertDir: t.TempDir()}, &rest.Config{}, http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- server.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	poll.Until(t, "a TLS handshake error in the log", func() bool {
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return strings.Contains(out.String(), "http: TLS handshake error")
	})
	for line := range strings.Lines(out.String()) {
		var entry struct{ Logger, Msg string }
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Errorf("not a JSON entry: %q", line)
		}
		if strings.Contains(entry.Msg, "TLS handshake error") && entry.Logger != "stdlog" {
			t.Errorf("the handshake error is logged by %q, not stdlog: %q", entry.Logger, line)
		}
	}
}

// freeAddress is a loopback address no one listens on.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
