package member

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
)

// TestStreamReceiveBufferIsBounded: a member's HTTP/2 connection tells
// its server that each stream may have at most streamReceiveBuffer bytes
// unread, so that members listing at once, faster than the process
// decodes, do not each buffer HTTP/2's default of 4 MiB a stream.
func TestStreamReceiveBufferIsBounded(t *testing.T) {
	certs := httptest.NewUnstartedServer(nil)
	certs.StartTLS()
	cert := certs.TLS.Certificates
	certs.Close()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listener := tls.NewListener(tcp, &tls.Config{Certificates: cert, NextProtos: []string{"h2"}})
	t.Cleanup(func() { _ = listener.Close() })
	pool, err := NewPool(Options{Registry: NewObservedRegistry(nil), Engage: engageNothing, Policy: kubeconfigtest.Permissive})
	if err != nil {
		t.Fatal(err)
	}
	m := newTestMember(t, pool, "https://"+tcp.Addr().String())
	defer m.stop()

	settings := make(chan http2.SettingsFrame, 1)
	go func() {
		c, err := listener.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := io.ReadFull(br, make([]byte, len(http2.ClientPreface))); err != nil {
			return
		}
		f, err := http2.NewFramer(io.Discard, br).ReadFrame()
		if s, ok := f.(*http2.SettingsFrame); err == nil && ok {
			settings <- *s
		}
	}()
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+tcp.Addr().String()+"/", nil)
		if resp, err := m.httpClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}()
	var s http2.SettingsFrame
	select {
	case s = <-settings:
	case <-time.After(time.Minute):
		t.Fatal("the member sent no SETTINGS within a minute")
	}
	window, ok := s.Value(http2.SettingInitialWindowSize)
	if !ok || window != streamReceiveBuffer {
		t.Fatalf("the member's connection announces a stream window of %d (set: %t), want %d", window, ok, streamReceiveBuffer)
	}
}
