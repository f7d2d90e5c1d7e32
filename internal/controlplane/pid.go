package controlplane

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// APIServerPID returns the process ID of env's kube-apiserver, which
// envtest does not expose: the kube-apiserver process in /proc whose
// --secure-port is env's. Linux only.
func APIServerPID(env *envtest.Environment) (int, error) {
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		return 0, err
	}
	portFlag := []byte("--secure-port=" + u.Port())
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil || len(cmdlines) == 0 {
		return 0, fmt.Errorf("no /proc to find the kube-apiserver at %s in", env.Config.Host)
	}
	for _, f := range cmdlines {
		cmdline, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile, or not ours to read
		}
		args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
		if filepath.Base(string(args[0])) != "kube-apiserver" {
			continue
		}
		for _, a := range args[1:] {
			if bytes.Equal(a, portFlag) {
				return strconv.Atoi(filepath.Base(filepath.Dir(f)))
			}
		}
	}
	return 0, fmt.Errorf("no kube-apiserver process with %s", portFlag)
}
