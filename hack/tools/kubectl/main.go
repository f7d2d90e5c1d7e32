// Command kubectl is the upstream kubectl, built from the Go module proxy for
// the project's envtest suites and demo.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
)

func main() {
	os.Exit(cli.Run(cmd.NewDefaultKubectlCommand()))
}
