package cluster

import (
	"errors"
	"net"
	"testing"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

func TestDialControlRefusesLinkLocalAddresses(t *testing.T) {
	for address, want := range map[string]error{
		"169.254.169.254:443":       errLinkLocalDial,
		"[fe80::1%eth0]:443":        errLinkLocalDial,
		"[::ffff:169.254.1.1]:6443": errLinkLocalDial,
		"100.100.100.200:80":        errLinkLocalDial,
		"10.0.0.1:6443":             nil,
		"127.0.0.1:6443":            nil,
	} {
		if got := (Policy{}).dialControl("tcp", address, nil); !errors.Is(got, want) {
			t.Errorf("dialing %s: got %v, want %v", address, got, want)
		}
		if got := (Policy{AllowLinkLocal: true}).dialControl("tcp", address, nil); got != nil {
			t.Errorf("dialing %s with AllowLinkLocal: got %v, want nil", address, got)
		}
	}
}

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
