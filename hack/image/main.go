package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := execute(ctx, os.Args[1:], os.Stderr); err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintf(os.Stderr, "image: %v\n", err)
		}
		os.Exit(1)
	}
}

// errUsage is returned for bad usage, which the command has explained.
var errUsage = errors.New("bad usage")

const usage = `Usage:
  image build [-root DIR] [-out DIR] [-ca-certs FILE]   build the image into an OCI layout
  image push -image REF [-layout DIR]                    push the layout's index to REF
`

// execute runs the subcommand args names, and prints its progress to
// stderr.
func execute(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	fs := flag.NewFlagSet("image "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	parse := func() error {
		if err := fs.Parse(args[1:]); err != nil {
			return errUsage
		}
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
			return errUsage
		}
		return nil
	}
	switch args[0] {
	case "build":
		var opts buildOptions
		out := fs.String("out", "bin/image", "the directory to write the OCI layout to (replaced)")
		fs.StringVar(&opts.Root, "root", ".", "the fleet-manager repository")
		fs.StringVar(&opts.CACerts, "ca-certs", defaultCACerts, "the CA certificate bundle to put in the image")
		if err := parse(); err != nil {
			return err
		}
		opts.Log = stderr
		idx, err := build(ctx, opts)
		if err != nil {
			return err
		}
		if err := writeLayout(*out, idx); err != nil {
			return err
		}
		digest, err := idx.Digest()
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s: index %s\n", *out, digest)
		return nil
	case "push":
		ref := fs.String("image", "", "the reference to push to, e.g. ghcr.io/fleetkube/fleet-manager:v0.1.0")
		dir := fs.String("layout", "bin/image", "the OCI layout image build wrote")
		if err := parse(); err != nil {
			return err
		}
		if *ref == "" {
			fmt.Fprintf(stderr, "%s: -image is required\n", fs.Name())
			return errUsage
		}
		digest, err := push(ctx, *dir, *ref)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "pushed %s\n", digest)
		return nil
	default:
		fmt.Fprintf(stderr, "image: unknown command %q\n\n%s", args[0], usage)
		return errUsage
	}
}
