package fleetbinary

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Build builds fleet-manager into dir and returns its path. It is built
// as the calling tests are (-race shares their build cache), so that the
// child's races fail them too.
func Build(dir string) (string, error) {
	binary := filepath.Join(dir, "fleet-manager")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "github.com/fleetkube/fleet-manager/cmd/fleet-manager")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building fleet-manager: %v\n%s", err, out)
	}
	return binary, nil
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
