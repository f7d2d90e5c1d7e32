package cluster

import (
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// MaxKubeconfigBytes bounds the size of a kubeconfig read from a Secret.
const MaxKubeconfigBytes = 1 << 20

// Policy says which optional kubeconfig features a member may use. The zero
// value is the strictest policy.
type Policy struct{}

// RefusedError is returned when a kubeconfig is malformed or breaks the
// policy. Its message never contains credential material.
type RefusedError struct {
	// Reason is a CamelCase word for status conditions and Events.
	Reason string
	// Message explains the refusal to a person.
	Message string
}

func (e *RefusedError) Error() string { return e.Reason + ": " + e.Message }

func refuse(reason, format string, args ...any) error {
	return &RefusedError{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Parse turns kubeconfig bytes into a rest.Config. Every kubeconfig a member
// is built from passes through here. The policy is checked on the raw parsed
// config, before a client exists, because building one already reads the
// files a kubeconfig names.
func (p Policy) Parse(data []byte) (*rest.Config, error) {
	if len(data) > MaxKubeconfigBytes {
		return nil, refuse("KubeconfigTooLarge", "kubeconfig is %d bytes, the limit is %d", len(data), MaxKubeconfigBytes)
	}
	raw, err := clientcmd.Load(data)
	if err != nil {
		return nil, refuse("KubeconfigMalformed", "kubeconfig cannot be parsed")
	}
	if err := p.check(raw); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*raw, nil).ClientConfig()
	if err != nil {
		return nil, refuse("KubeconfigInvalid", "kubeconfig is not usable: %s", scrub(err))
	}
	return cfg, nil
}

func (p Policy) check(raw *clientcmdapi.Config) error {
	kctx, ok := raw.Contexts[raw.CurrentContext]
	if raw.CurrentContext == "" || !ok {
		return refuse("NoCurrentContext", "kubeconfig has no usable current context")
	}
	cl, ok := raw.Clusters[kctx.Cluster]
	if !ok {
		return refuse("UnknownCluster", "current context names a cluster that does not exist")
	}
	user, ok := raw.AuthInfos[kctx.AuthInfo]
	if !ok {
		return refuse("UnknownUser", "current context names a user that does not exist")
	}
	if cl.CertificateAuthority != "" || user.TokenFile != "" || user.ClientCertificate != "" || user.ClientKey != "" {
		return refuse("FileReference", "kubeconfig refers to a file; embed the data instead")
	}
	if user.Exec != nil {
		return refuse("ExecPluginRefused", "exec plugins are not allowed")
	}
	if user.AuthProvider != nil {
		return refuse("AuthProviderRefused", "auth-provider plugins are not allowed")
	}
	if cl.InsecureSkipTLSVerify {
		return refuse("InsecureTLSRefused", "insecure-skip-tls-verify is not allowed")
	}
	return nil
}

// scrub keeps the kind of a client-go error but none of its text, which can
// quote kubeconfig content.
func scrub(err error) string {
	if errors.Is(err, clientcmd.ErrEmptyConfig) {
		return "empty config"
	}
	return "invalid client configuration"
}
