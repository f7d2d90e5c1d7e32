package controlplane

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// writeAuditPolicy records every write request's metadata and nothing
// else.
const writeAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`

// StartAudited starts n control planes, as Start does, each of which logs
// every write request to AuditLog(dir, i).
func StartAudited(n int, dir string) ([]*envtest.Environment, error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(writeAuditPolicy), 0o600); err != nil {
		return nil, err
	}
	return start(n, func(i int, env *envtest.Environment) error {
		args := env.ControlPlane.GetAPIServer().Configure()
		args.Set("audit-policy-file", policy)
		args.Set("audit-log-path", AuditLog(dir, i))
		return nil
	})
}

// AuditLog is the audit log of control plane i of StartAudited(n, dir).
func AuditLog(dir string, i int) string { return filepath.Join(dir, fmt.Sprintf("audit-%d.log", i)) }

// Write is one write request in an audit log.
type Write struct {
	Verb      string
	UserAgent string
	Resource  string
	Namespace string
	Name      string
	Time      time.Time
}

func (w Write) String() string {
	return fmt.Sprintf("%s %s %s/%s by %q", w.Verb, w.Resource, w.Namespace, w.Name, w.UserAgent)
}

// Writes returns the write requests of the audit log at path that
// completed after since and whose user agent starts with userAgent.
func Writes(path, userAgent string, since time.Time) ([]Write, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var writes []Write
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for scanner.Scan() {
		var e struct {
			Stage     string `json:"stage"`
			Verb      string `json:"verb"`
			UserAgent string `json:"userAgent"`
			ObjectRef struct {
				Resource  string `json:"resource"`
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
			} `json:"objectRef"`
			StageTimestamp time.Time `json:"stageTimestamp"`
		}
		if err := json.Unmarshal(scanner.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if e.Stage != "ResponseComplete" || !strings.HasPrefix(e.UserAgent, userAgent) || !e.StageTimestamp.After(since) ||
			!slices.Contains([]string{"create", "update", "patch", "delete", "deletecollection"}, e.Verb) {
			continue
		}
		writes = append(writes, Write{Verb: e.Verb, UserAgent: e.UserAgent, Resource: e.ObjectRef.Resource, Namespace: e.ObjectRef.Namespace, Name: e.ObjectRef.Name, Time: e.StageTimestamp})
	}
	return writes, scanner.Err()
}
