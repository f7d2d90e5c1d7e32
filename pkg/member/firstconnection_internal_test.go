package member

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"
)

// blockingTransport holds each request until told, then reports that it
// got its connection, and answers.
type blockingTransport struct {
	got   chan *http.Request
	going chan struct{}
}

func (b *blockingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	b.got <- req
	select {
	case <-b.going:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{})
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

// TestRequestWaitingForTheFirstConnectionEndsWithItsContext: while a
// member's first request dials, the others wait for its connection, each
// at most until its own context ends, as a probe's timeout ends it; once
// the first has its connection, they go.
func TestRequestWaitingForTheFirstConnectionEndsWithItsContext(t *testing.T) {
	next := &blockingTransport{got: make(chan *http.Request, 3), going: make(chan struct{})}
	// As over HTTP/1: no connection is ever shared, so each request dials
	// in turn.
	f := &firstConnection{next: next, connected: func() bool { return false }, slot: make(chan struct{}, 1)}
	request := func(ctx context.Context) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://member.invalid/", nil)
		return req
	}

	first := make(chan error, 1)
	go func() {
		_, err := f.RoundTrip(request(t.Context()))
		first <- err
	}()
	<-next.got // the first dials

	probe, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := f.RoundTrip(request(probe)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request waiting for the first connection returned %v, want %v", err, context.DeadlineExceeded)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("a request waiting for the first connection returned after %s, its timeout 50ms", took)
	}
	select {
	case <-next.got:
		t.Fatal("a request dialled while the first was dialling")
	default:
	}

	second := make(chan error, 1)
	go func() {
		_, err := f.RoundTrip(request(t.Context()))
		second <- err
	}()
	close(next.going) // the first has its connection
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	<-next.got
	if err := <-second; err != nil {
		t.Fatal(err)
	}
}
