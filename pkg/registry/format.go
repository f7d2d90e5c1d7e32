package registry

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

// The native registration format: a Secret in the fleet namespace.
const (
	// KubeconfigLabel marks a Secret as a registration when set to "true".
	KubeconfigLabel = "fleet.fleetkube.io/kubeconfig"
	// ClusterNameAnnotation overrides the cluster name a Secret registers:
	// in every format but Cluster API's, and in Cluster API's only for a
	// Secret in the fleet namespace.
	ClusterNameAnnotation = "fleet.fleetkube.io/cluster-name"
	// KubeconfigKey is the data key that holds the kubeconfig.
	KubeconfigKey = "kubeconfig"
)

// The formats other tools write, read so that a fleet registered elsewhere
// needs no re-registration.
const (
	MulticlusterRuntimeLabel = "sigs.k8s.io/multicluster-runtime-kubeconfig"

	ClusterAPISecretType   corev1.SecretType = "cluster.x-k8s.io/secret"
	ClusterAPINameSuffix                     = "-kubeconfig"
	ClusterAPIClusterLabel                   = "cluster.x-k8s.io/cluster-name"
	ClusterAPIKey                            = "value"

	ArgoCDSecretTypeLabel = "argocd.argoproj.io/secret-type"
	ArgoCDClusterType     = "cluster"
)

// Format is one way of registering a cluster in a Secret: which Secrets
// hold registrations, and how to read one.
type Format struct {
	// Name names the format in logs and controller names.
	Name string
	// Namespaces the format's Secrets live in; empty means all.
	Namespaces []string
	// Label and Field select the format's Secrets on the API server, so
	// that the hub caches no other Secret.
	Label labels.Selector
	Field fields.Selector
	// Match picks the format's Secrets among those selected, for what
	// selectors cannot express.
	Match func(*corev1.Secret) bool
	// Keys are the data keys Read uses; the Secret cache keeps no other.
	Keys []string
	// Read returns the registration a matching Secret holds, or a
	// RefusedError.
	Read func(*corev1.Secret) (Registration, error)
	// AnnotationInFleetOnly, if true, has ClusterNameAnnotation ignored on
	// the format's Secrets outside the fleet namespace, whose writers may
	// not choose any name: Read sees none of it there.
	AnnotationInFleetOnly bool
}

// NativeFormatName is the native format's name.
const NativeFormatName = "native"

// NativeFormat reads Secrets labelled fleet.fleetkube.io/kubeconfig: "true"
// in namespace, with the kubeconfig under key "kubeconfig". The cluster
// name is the Secret's name.
func NativeFormat(namespace string) Format {
	return labelledKubeconfig(NativeFormatName, namespace, KubeconfigLabel)
}

// MulticlusterRuntimeFormat reads multicluster-runtime's kubeconfig
// provider Secrets: labelled sigs.k8s.io/multicluster-runtime-kubeconfig:
// "true" in namespace, with the kubeconfig under key "kubeconfig".
func MulticlusterRuntimeFormat(namespace string) Format {
	return labelledKubeconfig("multicluster-runtime", namespace, MulticlusterRuntimeLabel)
}

func labelledKubeconfig(name, namespace, label string) Format {
	return Format{
		Name:       name,
		Namespaces: []string{namespace},
		Label:      labels.SelectorFromSet(labels.Set{label: "true"}),
		Match:      func(*corev1.Secret) bool { return true },
		Keys:       []string{KubeconfigKey},
		Read: func(s *corev1.Secret) (Registration, error) {
			return readKey(s, s.Name, KubeconfigKey)
		},
	}
}

// ClusterAPIFormat reads Cluster API's kubeconfig Secrets: type
// cluster.x-k8s.io/secret, named <cluster>-kubeconfig, with the kubeconfig
// under key "value", in namespaces (all if empty). The cluster is named
// <namespace>.<cluster>, because the same cluster name in two namespaces
// is normal; <cluster> is the cluster.x-k8s.io/cluster-name label, else the
// Secret's name without the suffix. The cluster name annotation is
// honoured only in the fleet namespace: whoever writes Secrets in another
// namespace names only clusters prefixed with that namespace.
func ClusterAPIFormat(namespaces []string) Format {
	return Format{
		Name:       "cluster-api",
		Namespaces: slices.Clone(namespaces),
		Label:      labels.Everything(),
		Field:      fields.OneTermEqualSelector("type", string(ClusterAPISecretType)),
		Match: func(s *corev1.Secret) bool {
			return s.Type == ClusterAPISecretType && strings.HasSuffix(s.Name, ClusterAPINameSuffix)
		},
		Keys: []string{ClusterAPIKey},
		Read: func(s *corev1.Secret) (Registration, error) {
			name := s.Labels[ClusterAPIClusterLabel]
			if name == "" {
				name = strings.TrimSuffix(s.Name, ClusterAPINameSuffix)
			}
			return readKey(s, s.Namespace+"."+name, ClusterAPIKey)
		},
		AnnotationInFleetOnly: true,
	}
}

// ArgoCDFormat reads Argo CD's cluster Secrets: labelled
// argocd.argoproj.io/secret-type: cluster in namespace, with keys "name",
// "server" and "config". The config is turned into a kubeconfig, which
// then meets the same policy as any other: exec and AWS authentication,
// insecure TLS and proxies are refused unless allowed.
func ArgoCDFormat(namespace string) Format {
	return Format{
		Name:       "argocd",
		Namespaces: []string{namespace},
		Label:      labels.SelectorFromSet(labels.Set{ArgoCDSecretTypeLabel: ArgoCDClusterType}),
		Match:      func(*corev1.Secret) bool { return true },
		Keys:       []string{"name", "server", "config"},
		Read:       readArgoCD,
	}
}

func readKey(s *corev1.Secret, defaultName, key string) (Registration, error) {
	reg := Registration{ClusterName: nameOf(s, defaultName), Kubeconfig: s.Data[key]}
	if err := checkName(reg.ClusterName, true); err != nil {
		return reg, err
	}
	if len(reg.Kubeconfig) == 0 {
		return reg, kubeconfig.Refuse("MissingKubeconfig", "the Secret has no data key %q", key)
	}
	return reg, kubeconfig.CheckBudget("kubeconfig", reg.Kubeconfig)
}

func nameOf(s *corev1.Secret, defaultName string) string {
	if name := s.Annotations[ClusterNameAnnotation]; name != "" {
		return name
	}
	return defaultName
}

// checkName refuses a name that is not a cluster name, with a hint at the
// annotation if the registration can be renamed with it (a Secret can).
func checkName(name string, renamable bool) error {
	err := ValidateName(name)
	switch {
	case err == nil:
		return nil
	case renamable:
		return kubeconfig.Refuse(ReasonInvalidClusterName, "%s; set the annotation %s to a valid name", err, ClusterNameAnnotation)
	default:
		return kubeconfig.Refuse(ReasonInvalidClusterName, "%s", err)
	}
}

// argoCDConfig is the part of Argo CD's cluster config that matters here.
type argoCDConfig struct {
	Username        string `json:"username"`
	Password        string `json:"password"`
	BearerToken     string `json:"bearerToken"`
	TLSClientConfig struct {
		Insecure   bool   `json:"insecure"`
		ServerName string `json:"serverName"`
		CertData   []byte `json:"certData"`
		KeyData    []byte `json:"keyData"`
		CAData     []byte `json:"caData"`
	} `json:"tlsClientConfig"`
	ExecProviderConfig *struct {
		Command    string            `json:"command"`
		Args       []string          `json:"args"`
		Env        map[string]string `json:"env"`
		APIVersion string            `json:"apiVersion"`
	} `json:"execProviderConfig"`
	AWSAuthConfig *struct {
		ClusterName string `json:"clusterName"`
		RoleARN     string `json:"roleARN"`
		Profile     string `json:"profile"`
	} `json:"awsAuthConfig"`
	ProxyURL string `json:"proxyUrl"`
}

// argoCDAWSCommand is the exec plugin Argo CD runs for AWS authentication.
const argoCDAWSCommand = "argocd-k8s-auth"

func readArgoCD(s *corev1.Secret) (Registration, error) {
	reg := Registration{ClusterName: nameOf(s, string(s.Data["name"]))}
	if err := checkName(reg.ClusterName, true); err != nil {
		return reg, err
	}
	server := string(s.Data["server"])
	if server == "" {
		return reg, kubeconfig.Refuse("MissingServer", "the Argo CD Secret has no data key %q", "server")
	}
	if err := kubeconfig.CheckBudget("the Argo CD config", s.Data["config"]); err != nil {
		return reg, err
	}
	var cfg argoCDConfig
	if err := json.Unmarshal(s.Data["config"], &cfg); err != nil {
		return reg, kubeconfig.Refuse("KubeconfigMalformed", "the Argo CD config is not valid JSON of the expected shape")
	}
	// Checked here too, so that the refusal names Argo CD's field.
	for _, f := range []struct{ name, value string }{
		{"bearerToken", cfg.BearerToken},
		{"username", cfg.Username},
		{"password", cfg.Password},
	} {
		if err := kubeconfig.CheckHeaderValue(f.name, f.value); err != nil {
			return reg, err
		}
	}
	user := &clientcmdapi.AuthInfo{
		Token:                 cfg.BearerToken,
		Username:              cfg.Username,
		Password:              cfg.Password,
		ClientCertificateData: cfg.TLSClientConfig.CertData,
		ClientKeyData:         cfg.TLSClientConfig.KeyData,
	}
	switch {
	case cfg.ExecProviderConfig != nil:
		user.Exec = &clientcmdapi.ExecConfig{
			Command:         cfg.ExecProviderConfig.Command,
			Args:            cfg.ExecProviderConfig.Args,
			APIVersion:      cfg.ExecProviderConfig.APIVersion,
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		}
		// In name order: the kubeconfig must be the same bytes on every
		// read, or the pool, which fingerprints them, rebuilds the member.
		for _, k := range slices.Sorted(maps.Keys(cfg.ExecProviderConfig.Env)) {
			user.Exec.Env = append(user.Exec.Env, clientcmdapi.ExecEnvVar{Name: k, Value: cfg.ExecProviderConfig.Env[k]})
		}
	case cfg.AWSAuthConfig != nil:
		args := []string{"aws", "--cluster-name", cfg.AWSAuthConfig.ClusterName}
		if cfg.AWSAuthConfig.RoleARN != "" {
			args = append(args, "--role-arn", cfg.AWSAuthConfig.RoleARN)
		}
		if cfg.AWSAuthConfig.Profile != "" {
			args = append(args, "--profile", cfg.AWSAuthConfig.Profile)
		}
		user.Exec = &clientcmdapi.ExecConfig{
			Command:         argoCDAWSCommand,
			Args:            args,
			APIVersion:      "client.authentication.k8s.io/v1beta1",
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		}
	}
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["argocd"] = &clientcmdapi.Cluster{
		Server:                   server,
		TLSServerName:            cfg.TLSClientConfig.ServerName,
		InsecureSkipTLSVerify:    cfg.TLSClientConfig.Insecure,
		CertificateAuthorityData: cfg.TLSClientConfig.CAData,
		ProxyURL:                 cfg.ProxyURL,
	}
	kubeconfig.AuthInfos["argocd"] = user
	kubeconfig.Contexts["argocd"] = &clientcmdapi.Context{Cluster: "argocd", AuthInfo: "argocd"}
	kubeconfig.CurrentContext = "argocd"
	data, err := clientcmd.Write(*kubeconfig)
	if err != nil {
		return reg, fmt.Errorf("writing the kubeconfig of Argo CD cluster %q: %w", reg.ClusterName, err)
	}
	reg.Kubeconfig = data
	return reg, nil
}
