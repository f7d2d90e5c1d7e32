package member

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// gzipWatchServer serves watches as an API server serves a compressed
// watch-list: each flush a gzip member of its own, flushed, then closed. Each watch gets first,
// then, once release is closed, second, and ends.
func gzipWatchServer(t *testing.T, first, second []byte, release <-chan struct{}) *httptest.Server {
	t.Helper()
	member := func(w http.ResponseWriter, b []byte) {
		gw := gzip.NewWriter(w)
		_, _ = gw.Write(b)
		_ = gw.Flush()
		_ = gw.Close()
		w.(http.Flusher).Flush()
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			t.Errorf("%s asked for %q, not gzip", r.URL, r.Header.Get("Accept-Encoding"))
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusOK)
		member(w, first)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		member(w, second)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func randomText(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return []byte(hex.EncodeToString(b))
}

// TestIdleCompressedWatchHoldsNoDecompressor: a member's watch whose API
// server compresses it holds no gzip reader between its events; the
// transport's own decompression held one, about 45 KiB, for each watch's
// whole life. The events still arrive whole and in order.
func TestIdleCompressedWatchHoldsNoDecompressor(t *testing.T) {
	const watches = 100
	first, second := randomText(t, 2048), randomText(t, 2048)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	srv := gzipWatchServer(t, first, second, release)
	t.Cleanup(releaseAll) // before the server closes, which waits for its watches
	client := &http.Client{Transport: watchGzip{next: srv.Client().Transport}}
	t.Cleanup(client.CloseIdleConnections)

	// What the test keeps per watch is allocated before the heap is read.
	type watch struct {
		got      bytes.Buffer
		buf      []byte
		gotFirst chan struct{}
		done     chan error
	}
	ws := make([]*watch, watches)
	for i := range ws {
		ws[i] = &watch{buf: make([]byte, 512), gotFirst: make(chan struct{}), done: make(chan error, 1)}
		ws[i].got.Grow(len(first) + len(second))
	}
	// The connection, and what a first request sets up, are not a watch's.
	warm, err := client.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, warm.Body)
	_ = warm.Body.Close()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	for _, w := range ws {
		resp, err := client.Get(srv.URL + "/api/v1/configmaps?watch=true&sendInitialEvents=true")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer resp.Body.Close()
			var once sync.Once
			buf := w.buf
			for {
				n, err := resp.Body.Read(buf)
				w.got.Write(buf[:n])
				if w.got.Len() >= len(first) {
					once.Do(func() { close(w.gotFirst) })
				}
				if err != nil {
					w.done <- err
					return
				}
			}
		}()
	}
	for _, w := range ws {
		select {
		case <-w.gotFirst:
		case err := <-w.done:
			t.Fatalf("watch ended before its first event: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("no first event within 30 s")
		}
	}
	// Each watch now waits for its next event, as an informer's does.
	// Two collections: the pools' readers, which no watch holds, go with
	// the second.
	var idle runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&idle)
	perWatch := (int64(idle.HeapAlloc) - int64(before.HeapAlloc)) / watches
	t.Logf("heap per idle watch: %d KiB", perWatch>>10)
	if perWatch > 20<<10 {
		t.Errorf("an idle compressed watch holds %d KiB of heap, want at most 20 (its gzip reader holds about 45)", perWatch>>10)
	}

	releaseAll()
	want := append(append([]byte(nil), first...), second...)
	for _, w := range ws {
		select {
		case err := <-w.done:
			if err != io.EOF {
				t.Fatalf("watch ended with %v, want io.EOF", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("watch not ended within 30 s")
		}
		if !bytes.Equal(w.got.Bytes(), want) {
			t.Fatalf("watch read %d bytes that are not its two events (%d bytes)", w.got.Len(), len(want))
		}
	}
}

// TestWatchGzipLeavesOtherRequestsToTheTransport: a list, and a request
// that chose its own encoding, reach the transport as they were.
func TestWatchGzipLeavesOtherRequestsToTheTransport(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Accept-Encoding"))
		mu.Unlock()
		_, _ = io.WriteString(w, "plain")
	}))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: watchGzip{next: srv.Client().Transport}}
	for _, req := range []func() (*http.Request, error){
		func() (*http.Request, error) {
			return http.NewRequest(http.MethodGet, srv.URL+"/api/v1/configmaps", nil)
		},
		func() (*http.Request, error) {
			r, err := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/configmaps?watch=true", nil)
			if err == nil {
				r.Header.Set("Accept-Encoding", "identity")
			}
			return r, err
		},
		// A server that does not compress: the body is passed through.
		func() (*http.Request, error) {
			return http.NewRequest(http.MethodGet, srv.URL+"/api/v1/configmaps?watch=true", nil)
		},
	} {
		r, err := req()
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || string(body) != "plain" {
			t.Fatalf("%s: body %q, %v", r.URL, body, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The transport asks for gzip itself on the list; the watch asks for
	// it through watchGzip.
	if want := []string{"gzip", "identity", "gzip"}; strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Fatalf("Accept-Encoding seen %q, want %q", seen, want)
	}
}

// TestCorruptCompressedWatchFails: a gzip member whose checksum does not
// match, or a stream cut inside a member, ends the watch with an error
// (the informer watches again), never with data that was not sent.
func TestCorruptCompressedWatchFails(t *testing.T) {
	t.Parallel()
	event := randomText(t, 2048)
	var good bytes.Buffer
	gw := gzip.NewWriter(&good)
	_, _ = gw.Write(event)
	_ = gw.Close()
	badChecksum := bytes.Clone(good.Bytes())
	badChecksum[len(badChecksum)-5] ^= 0xff // the CRC-32 of the trailer
	for name, tc := range map[string]struct {
		body []byte
		want error
	}{
		"checksum":   {append(bytes.Clone(good.Bytes()), badChecksum...), gzip.ErrChecksum},
		"cut":        {append(bytes.Clone(good.Bytes()), good.Bytes()[:len(good.Bytes())/2]...), io.ErrUnexpectedEOF},
		"cut header": {append(bytes.Clone(good.Bytes()), good.Bytes()[:4]...), io.ErrUnexpectedEOF},
	} {
		t.Run(name, func(t *testing.T) {
			s := &gzipStream{body: io.NopCloser(bytes.NewReader(tc.body))}
			got, err := io.ReadAll(s)
			if !errors.Is(err, tc.want) {
				t.Fatalf("read ended with %v, want %v", err, tc.want)
			}
			if !bytes.HasPrefix(got, event) || len(got) > 2*len(event) {
				t.Fatalf("read %d bytes, want the first event whole and no more than the second's", len(got))
			}
		})
	}
}
