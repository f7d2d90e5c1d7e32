package cluster

import (
	"errors"
	"testing"
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
