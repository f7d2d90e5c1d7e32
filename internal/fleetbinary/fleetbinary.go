package fleetbinary

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Build puts fleet-manager into dir and returns its path. It is built
// as the calling tests are (-race shares their build cache), so that the
// child's races fail them too, and once for every test package of the
// repository that asks: into a directory of the Go build cache of its own
// (fleet-manager-test/, per repository and race mode), where go build
// relinks only when the binary's sources or build settings changed (its
// build ID), a file lock making a package that asks at the same time wait
// for that build. dir gets its own copy, so that a later rebuild never
// changes the binary a caller runs.
func Build(dir string) (string, error) {
	shared, err := buildShared()
	if err != nil {
		return "", err
	}
	binary := filepath.Join(dir, "fleet-manager")
	if err := os.Link(shared, binary); err != nil {
		if err := copyFile(shared, binary); err != nil {
			return "", fmt.Errorf("copying fleet-manager: %w", err)
		}
	}
	return binary, nil
}

// buildShared builds, or finds current, the shared binary while holding
// its directory's lock, and returns its path.
func buildShared() (string, error) {
	out, err := exec.Command("go", "env", "GOCACHE", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	env := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(env) != 2 || env[0] == "" || env[0] == "off" || env[1] == "" {
		return "", fmt.Errorf("go env GOCACHE GOMOD gave %q: fleet-manager is built in the build cache of its module", out)
	}
	mode := "norace"
	if raceEnabled {
		mode = "race"
	}
	module := sha256.Sum256([]byte(filepath.Dir(env[1])))
	sharedDir := filepath.Join(env[0], "fleet-manager-test", hex.EncodeToString(module[:8])+"-"+mode)
	if err := os.MkdirAll(sharedDir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(sharedDir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking %s: %w", sharedDir, err)
	}
	binary := filepath.Join(sharedDir, "fleet-manager")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err = exec.Command("go", append(args, "github.com/fleetkube/fleet-manager/cmd/fleet-manager")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building fleet-manager: %v\n%s", err, out)
	}
	return binary, nil
}

// BuildProgram builds the main package pkg (an import path, or a
// directory relative to the caller's) into out, as the calling tests are
// built (-race when they are): it then links packages their build already
// compiled, where a build of its own configuration would compile every
// dependency again (the Kubernetes libraries, some 600 CPU seconds cold).
func BuildProgram(out, pkg string) error {
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	if output, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", pkg, err, output)
	}
	return nil
}

// copyFile copies the executable from to a new file to.
func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		return err
	}
	return dst.Close()
}

// Process is one fleet-manager process, writing its output to a log file.
type Process struct {
	cmd *exec.Cmd
	log *os.File
}

// Start starts binary with args, its output going to the file logPath.
// The process is SIGKILLed if the calling process dies first.
func Start(binary, logPath string, args ...string) (*Process, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &Process{log: log, cmd: exec.Command(binary, args...)}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	// Killed with its parent, so that a test binary that panics or is
	// killed leaves no manager running.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		_ = log.Close()
		return nil, err
	}
	return p, nil
}

// Kill SIGKILLs the process and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
	_ = p.log.Close()
}

// Stop ends the process as Kubernetes would, with SIGTERM, and returns
// how it exited.
func (p *Process) Stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	err := p.cmd.Wait()
	_ = p.log.Close()
	return err
}

// Exited reports whether the process was waited for.
func (p *Process) Exited() bool { return p.cmd.ProcessState != nil }

// Output is what the process wrote so far.
func (p *Process) Output() (string, error) {
	out, err := os.ReadFile(p.log.Name())
	return string(out), err
}

// Check returns an error if the process wrote a panic, a data race or a
// fatal error, with its output.
func (p *Process) Check() error {
	out, err := p.Output()
	if err != nil {
		return err
	}
	for _, bad := range []string{"panic:", "WARNING: DATA RACE", "fatal error:"} {
		if strings.Contains(out, bad) {
			return errors.New("the manager wrote " + bad + "\n" + out)
		}
	}
	return nil
}
