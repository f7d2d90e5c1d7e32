package kubeconfig

import (
	"errors"
	"testing"
)

func TestDialControlRefusesLinkLocalAddresses(t *testing.T) {
	for address, want := range map[string]error{
		"169.254.169.254:443":       ErrLinkLocalDial,
		"[fe80::1%eth0]:443":        ErrLinkLocalDial,
		"[::ffff:169.254.1.1]:6443": ErrLinkLocalDial,
		"100.100.100.200:80":        ErrLinkLocalDial,
		"10.0.0.1:6443":             nil,
		"127.0.0.1:6443":            nil,
	} {
		if got := (Policy{}).DialControl("tcp", address, nil); !errors.Is(got, want) {
			t.Errorf("dialing %s: got %v, want %v", address, got, want)
		}
		if got := (Policy{AllowLinkLocal: true}).DialControl("tcp", address, nil); got != nil {
			t.Errorf("dialing %s with AllowLinkLocal: got %v, want nil", address, got)
		}
	}
}
