package cluster

import (
	"errors"
	"net"
	"testing"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

func TestClosingConnectionErrorIsNotRetried(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	for _, closing := range []bool{false, true} {
		local, err := net.Dial("tcp", listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		remote, err := listener.Accept()
		if err != nil {
			t.Fatal(err)
		}
		conn := &notifyingConn{Conn: local, closed: func() {}, closing: func() bool { return closing }}
		read := make(chan error)
		go func() {
			_, err := conn.Read(make([]byte, 1))
			read <- err
		}()
		_ = conn.Close()
		_ = remote.Close()
		err = <-read
		// client-go retries a GET after a second when an error looks like
		// a dropped connection, whatever its context.
		if retried := utilnet.IsProbableEOF(err) || utilnet.IsConnectionReset(err); retried == closing {
			t.Errorf("closing=%t: read error %q looks like a dropped connection: %t", closing, err, retried)
		}
		_, err = conn.Write([]byte{0})
		if closing && !errors.Is(err, errClosing) {
			t.Errorf("closing: write error %v, want %v", err, errClosing)
		}
	}
}
