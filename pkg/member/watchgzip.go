package member

import (
	"bufio"
	"compress/gzip"
	"io"
	"net/http"
	"sync"
)

// watchGzip decompresses the gzip-encoded responses of a member's watches
// itself, so that a watch holds a decompressor only while one of its
// events arrives, not for its whole life. An API server compresses a
// watch-list's stream (WatchListCompression) one flush at a time, each
// flush a gzip member of its own, and releases its compressor between
// them; Go's HTTP transports hold the client's gzip reader (its 32 KiB
// window and tables, about 45 KiB) until the body is closed, and a
// member's informers keep their watches open for hours. Lists and other
// requests are left to the transport. Network bytes are unchanged.
type watchGzip struct{ next http.RoundTripper }

func (w watchGzip) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || req.Header.Get("Accept-Encoding") != "" || req.Header.Get("Range") != "" || !isWatch(req) {
		return w.next.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := w.next.RoundTrip(req)
	if err != nil || resp.Header.Get("Content-Encoding") != "gzip" {
		return resp, err
	}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.Uncompressed = true
	resp.Body = &gzipStream{body: resp.Body}
	return resp, nil
}

// WrappedRoundTripper lets client-go find the transport underneath.
func (w watchGzip) WrappedRoundTripper() http.RoundTripper { return w.next }

func isWatch(req *http.Request) bool {
	switch req.URL.Query().Get("watch") {
	case "true", "1":
		return true
	}
	return false
}

var (
	gzipReaders  sync.Pool // *gzip.Reader
	bufioReaders sync.Pool // *bufio.Reader
)

// gzipStream reads a body of concatenated gzip members. A gzip reader, and
// the buffer it reads through, are taken from pools as a member's first
// byte arrives and given back at its end, checksum verified; an idle
// stream holds neither. Read and Close may run at once (a watch is stopped
// while it waits); Read is not called concurrently with itself.
type gzipStream struct {
	body io.ReadCloser
	// first is the byte that began the next member, read before a buffer
	// was taken.
	first firstByte
	src   *bufio.Reader // while a member is read, or unread bytes follow it
	zr    *gzip.Reader  // while a member is read
}

func (s *gzipStream) Read(p []byte) (int, error) {
	for {
		if s.zr == nil {
			if err := s.begin(); err != nil {
				return 0, err
			}
		}
		n, err := s.zr.Read(p)
		if err != io.EOF {
			return n, err
		}
		s.end()
		if n > 0 {
			return n, nil
		}
	}
}

// begin waits for the next member's first byte, then takes a reader.
func (s *gzipStream) begin() error {
	if s.src == nil {
		s.first.r = s.body
		for {
			n, err := s.body.Read(s.first.b[:])
			if n == 1 {
				break
			}
			if err != nil {
				return err // io.EOF: the stream ended between members
			}
		}
		s.first.pending = true
		src, _ := bufioReaders.Get().(*bufio.Reader)
		if src == nil {
			src = bufio.NewReader(&s.first)
		} else {
			src.Reset(&s.first)
		}
		s.src = src
	}
	zr, _ := gzipReaders.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(s.src)
	} else {
		err = zr.Reset(s.src)
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // a member's first byte came, not its header
	}
	if err != nil {
		return err
	}
	// The member's reader stops at its end, as src is an io.ByteReader.
	zr.Multistream(false)
	s.zr = zr
	return nil
}

// end gives back the reader of the member that ended, and the buffer, if
// it holds no byte of the next.
func (s *gzipStream) end() {
	gzipReaders.Put(s.zr)
	s.zr = nil
	if s.src.Buffered() == 0 {
		s.src.Reset(nil)
		bufioReaders.Put(s.src)
		s.src = nil
	}
}

func (s *gzipStream) Close() error { return s.body.Close() }

// firstByte reads a byte already read from r, then r.
type firstByte struct {
	b       [1]byte
	pending bool
	r       io.Reader
}

func (f *firstByte) Read(p []byte) (int, error) {
	if f.pending && len(p) > 0 {
		p[0], f.pending = f.b[0], false
		return 1, nil
	}
	return f.r.Read(p)
}
