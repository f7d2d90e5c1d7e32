package kubeconfig

import (
	"bytes"
	"testing"
	"time"
)

const smallKubeconfig = `apiVersion: v1
kind: Config
current-context: member
clusters:
- name: member
  cluster: {server: "https://member.example.com:6443"}
users:
- name: admin
  user: {token: tok-budget}
contexts:
- name: member
  context: {cluster: member, user: admin}
`

// Parses are weighed by input size: while all but a small parse's share
// of the decoding budget is taken, a small kubeconfig is still parsed, and
// a big one waits until the budget is released.
func TestParseWeighsInputSize(t *testing.T) {
	small := []byte(smallKubeconfig)
	// One comment line: within the structure budget, but big.
	big := append(bytes.Repeat([]byte("#"), MaxKubeconfigBytes/2), '\n')
	big = append(big, small...)

	held := int64(maxParsingBytes - minParseWeight)
	if err := parsing.Acquire(t.Context(), held); err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			parsing.Release(held)
		}
	}()

	parse := func(data []byte) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := Policy{}.Parse(data)
			done <- err
		}()
		return done
	}
	select {
	case err := <-parse(small):
		if err != nil {
			t.Fatalf("Parse(small) = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a small parse waited while its share of the budget was free")
	}

	bigDone := parse(big)
	select {
	case err := <-bigDone:
		t.Fatalf("a %d-byte parse ran while only %d bytes of the budget were free (error %v)", len(big), minParseWeight, err)
	case <-time.After(300 * time.Millisecond):
	}
	parsing.Release(held)
	released = true
	select {
	case err := <-bigDone:
		if err != nil {
			t.Fatalf("Parse(big) = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a big parse still waited once the budget was released")
	}
}
