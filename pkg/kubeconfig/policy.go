package kubeconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/http/httpguts"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// MaxKubeconfigBytes bounds the size of a kubeconfig read from a Secret.
const MaxKubeconfigBytes = 1 << 20

// Reasons of refusals that callers outside this package also give.
const (
	// ReasonInvalidHeaderValue refuses a credential or impersonation field
	// that cannot be sent in an HTTP header, such as a token with a line
	// break: every request of the member would fail.
	ReasonInvalidHeaderValue = "InvalidHeaderValue"
)

const malformedMessage = "kubeconfig is not a valid YAML or JSON Config"

// maxYAMLDepth bounds the nesting of a kubeconfig document. Real ones nest
// less than ten levels; extensions get some room above that.
const maxYAMLDepth = 32

// Policy says which optional kubeconfig features a member may use. The zero
// value is the strictest policy; each field relaxes one check.
//
// Every cluster and user entry of a kubeconfig is checked, not only those of
// the current context, and every server URL must be https:// with a host
// unless AllowPlainHTTPLoopback says otherwise. Some things no policy allows: file references (token,
// client certificate, client key, certificate authority), auth-provider
// plugins, YAML anchors and aliases, a current context that is missing
// or names an unknown cluster or user, and a token, username, password or
// impersonation field that an HTTP header cannot carry.
type Policy struct {
	// AllowInsecureTLS allows insecure-skip-tls-verify, which turns off
	// verification of the server's certificate.
	//
	// Defaults to false.
	AllowInsecureTLS bool

	// AllowExecCommands lists the exec plugin commands a kubeconfig may run.
	// A command must match an entry exactly: "aws" does not allow
	// "/usr/bin/aws", nor the other way round. The plugin's args and env
	// are used as the kubeconfig gives them, so only list commands that
	// cannot be talked into running arbitrary code.
	//
	// Defaults to nil: no exec plugin is allowed.
	AllowExecCommands []string

	// AllowPlainHTTPLoopback allows an http:// server URL whose host is a
	// loopback address (127.0.0.0/8, ::1) or "localhost". Other http://
	// servers are always refused.
	//
	// Defaults to false: every server URL must be https://.
	AllowPlainHTTPLoopback bool

	// AllowProxy allows a cluster's proxy-url. The proxy's host is still
	// checked like a server's (see AllowLinkLocal).
	//
	// Defaults to false.
	AllowProxy bool

	// AllowLinkLocal allows server and proxy hosts that are link-local
	// addresses (169.254.0.0/16, fe80::/10) or cloud metadata endpoints,
	// such as 169.254.169.254 or metadata.google.internal. Only literal
	// addresses and well-known metadata names are recognized; no name is
	// resolved.
	//
	// Defaults to false.
	AllowLinkLocal bool
}

// RefusedError is returned when a kubeconfig is malformed or breaks the
// policy. Its message never contains credential material.
type RefusedError struct {
	// Reason is a CamelCase word for status conditions and Events.
	Reason string
	// Message explains the refusal to a person.
	Message string
}

func (e *RefusedError) Error() string { return e.Reason + ": " + e.Message }

// Refuse returns a RefusedError with reason and a formatted message.
func Refuse(reason, format string, args ...any) error {
	return &RefusedError{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Parse turns kubeconfig bytes into a rest.Config. Every kubeconfig a member
// is built from passes through here. The policy is checked on the raw parsed
// config, before a client exists, because building one already reads the
// files a kubeconfig names. Parse never reads files or runs commands.
//
// Input over the budget (see CheckBudget) is refused before it is decoded,
// and decoding waits while too many bytes are being decoded at once.
func (p Policy) Parse(data []byte) (*rest.Config, error) {
	if err := CheckBudget("kubeconfig", data); err != nil {
		return nil, err
	}
	defer acquireParse(data)()
	if err := checkYAML(data); err != nil {
		return nil, err
	}
	raw, err := clientcmd.Load(data)
	if err != nil {
		return nil, Refuse("KubeconfigMalformed", malformedMessage)
	}
	if err := p.check(raw); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*raw, nil).ClientConfig()
	if err != nil {
		return nil, Refuse("KubeconfigInvalid", "kubeconfig is not usable: %s", Scrub(err))
	}
	return cfg, nil
}

// checkYAML refuses anchors, aliases and deep nesting before the document
// is decoded. The decoder behind clientcmd.Load expands every alias and
// stops a "billion laughs" only after some 400,000 expanded nodes (about
// 100 MB); a node tree keeps aliases as pointers and stays as small as the
// input.
func checkYAML(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return Refuse("KubeconfigMalformed", malformedMessage)
		}
		if err := checkNode(&doc, 0); err != nil {
			return err
		}
	}
}

func checkNode(n *yaml.Node, depth int) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return Refuse("YAMLAliasRefused", "kubeconfig uses YAML anchors or aliases; write every value out in full")
	}
	if depth > maxYAMLDepth {
		return Refuse("KubeconfigTooDeep", "kubeconfig nests deeper than %d levels", maxYAMLDepth)
	}
	for _, child := range n.Content {
		if err := checkNode(child, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (p Policy) check(raw *clientcmdapi.Config) error {
	kctx, ok := raw.Contexts[raw.CurrentContext]
	if raw.CurrentContext == "" || !ok {
		return Refuse("NoCurrentContext", "kubeconfig has no usable current context")
	}
	if _, ok := raw.Clusters[kctx.Cluster]; !ok {
		return Refuse("UnknownCluster", "current context names a cluster that does not exist")
	}
	if _, ok := raw.AuthInfos[kctx.AuthInfo]; !ok {
		return Refuse("UnknownUser", "current context names a user that does not exist")
	}
	// Sorted, so that a kubeconfig with several faults always gets the
	// same reason.
	for _, name := range slices.Sorted(maps.Keys(raw.Clusters)) {
		if err := p.checkCluster(raw.Clusters[name]); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(raw.AuthInfos)) {
		if err := p.checkUser(raw.AuthInfos[name]); err != nil {
			return err
		}
	}
	return nil
}

func (p Policy) checkCluster(cl *clientcmdapi.Cluster) error {
	if cl.CertificateAuthority != "" {
		return refuseFile("certificate-authority", "certificate-authority-data")
	}
	if cl.InsecureSkipTLSVerify && !p.AllowInsecureTLS {
		return Refuse("InsecureTLSRefused", "insecure-skip-tls-verify is refused: a server whose certificate is not verified may be anyone on the path, who then holds the member's credentials (fleet-manager --allow-insecure-tls accepts it)")
	}
	server, err := url.Parse(cl.Server)
	if err != nil || server.Hostname() == "" {
		return Refuse("ServerURLInvalid", "server must be an absolute URL with a host, such as https://host:6443")
	}
	host := normalizeHost(server.Hostname())
	switch server.Scheme {
	case "https":
	case "http":
		if !p.AllowPlainHTTPLoopback {
			return Refuse("PlainHTTPRefused", "server URL must use https")
		}
		if !isLoopback(host) {
			return Refuse("PlainHTTPRefused", "plain http is allowed only to a loopback address")
		}
	default:
		return Refuse("ServerURLInvalid", "server URL scheme must be https")
	}
	if err := p.checkHost("server", host); err != nil {
		return err
	}
	if cl.ProxyURL == "" {
		return nil
	}
	if !p.AllowProxy {
		return Refuse("ProxyRefused", "proxy-url is not allowed")
	}
	proxy, err := url.Parse(cl.ProxyURL)
	if err != nil || proxy.Hostname() == "" || !slices.Contains([]string{"http", "https", "socks5"}, proxy.Scheme) {
		return Refuse("ProxyURLInvalid", "proxy-url must be an http, https or socks5 URL with a host")
	}
	return p.checkHost("proxy", normalizeHost(proxy.Hostname()))
}

func (p Policy) checkUser(user *clientcmdapi.AuthInfo) error {
	switch {
	case user.TokenFile != "":
		return refuseFile("tokenFile", "token")
	case user.ClientCertificate != "":
		return refuseFile("client-certificate", "client-certificate-data")
	case user.ClientKey != "":
		return refuseFile("client-key", "client-key-data")
	case user.AuthProvider != nil:
		return Refuse("AuthProviderRefused", "auth-provider plugins are not allowed; use a token or client certificate")
	case user.Exec != nil && !slices.Contains(p.AllowExecCommands, user.Exec.Command):
		return Refuse("ExecPluginRefused", "exec plugin %s is refused: it would run a program on the manager's host, so only commands allowed by name run (fleet-manager --allow-exec-plugin=%s accepts it)", execCommandName(user.Exec.Command), execCommandName(user.Exec.Command))
	}
	return checkHeaderFields(user)
}

// execCommandName is command as a refusal may show it: a plain command
// name or path, else a placeholder, for it is the kubeconfig's own words.
func execCommandName(command string) string {
	if commandName.MatchString(command) {
		return command
	}
	return "<command>"
}

var commandName = regexp.MustCompile(`^[A-Za-z0-9._/+-]{1,128}$`)

// checkHeaderFields refuses the user's fields that client-go sends in HTTP
// headers when one holds a byte no header may carry. Username and password
// are base64-encoded into the header, but a control character in them is
// as surely a mistake, such as the newline "echo | base64" leaves.
func checkHeaderFields(user *clientcmdapi.AuthInfo) error {
	// In a fixed order, so that the message is the same on every read.
	for _, f := range []struct{ name, value string }{
		{"token", user.Token},
		{"username", user.Username},
		{"password", user.Password},
		{"as", user.Impersonate},
		{"as-uid", user.ImpersonateUID},
	} {
		if err := CheckHeaderValue(f.name, f.value); err != nil {
			return err
		}
	}
	for _, group := range user.ImpersonateGroups {
		if err := CheckHeaderValue("as-groups", group); err != nil {
			return err
		}
	}
	for _, key := range slices.Sorted(maps.Keys(user.ImpersonateUserExtra)) {
		if err := CheckHeaderValue("as-user-extra key", key); err != nil {
			return err
		}
		for _, value := range user.ImpersonateUserExtra[key] {
			if err := CheckHeaderValue("as-user-extra value", value); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckHeaderValue refuses value, the content of the kubeconfig field
// named field, if an HTTP header cannot carry it: it holds a control
// character other than a tab, such as CR or LF. The refusal names the
// field, never its value.
func CheckHeaderValue(field, value string) error {
	if httpguts.ValidHeaderFieldValue(value) {
		return nil
	}
	return Refuse(ReasonInvalidHeaderValue, "%s holds a control character, such as a line break, that no HTTP header may carry", field)
}

func refuseFile(field, embedded string) error {
	return Refuse("FileReference", "%s names a file, which is never read; put the content in %s instead", field, embedded)
}

// metadataHosts are cloud metadata endpoints outside the link-local ranges.
var metadataHosts = []string{
	"metadata.google.internal",
	"metadata.goog",
	"metadata",
	"instance-data",
	"instance-data.ec2.internal",
	"fd00:ec2::254",   // AWS IMDS over IPv6
	"100.100.100.200", // Alibaba Cloud
}

// checkHost refuses link-local and metadata hosts unless the policy allows
// them. host must be normalized.
func (p Policy) checkHost(what, host string) error {
	if p.AllowLinkLocal {
		return nil
	}
	addr, err := netip.ParseAddr(host)
	if err == nil && addr.IsLinkLocalUnicast() || slices.Contains(metadataHosts, host) {
		return Refuse("LinkLocalAddressRefused", "%s host is a link-local or cloud metadata address", what)
	}
	return nil
}

// normalizeHost lower-cases host, drops a trailing dot and turns an
// IPv4-mapped IPv6 address into IPv4, so that one spelling is compared.
func normalizeHost(host string) string {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if addr, err := netip.ParseAddr(host); err == nil {
		return addr.Unmap().String()
	}
	return host
}

func isLoopback(host string) bool {
	addr, err := netip.ParseAddr(host)
	return host == "localhost" || err == nil && addr.IsLoopback()
}

// Scrub keeps the kind of a client-go error but none of its text, which can
// quote kubeconfig content.
func Scrub(err error) string {
	if errors.Is(err, clientcmd.ErrEmptyConfig) {
		return "empty config"
	}
	return "invalid client configuration"
}

// ErrLinkLocalDial is returned when a member's connection would reach a
// link-local or metadata address, such as a host name that resolves to one.
var ErrLinkLocalDial = errors.New("refusing to connect to a link-local or cloud metadata address")

// DialControl checks each address a member's dialer is about to connect
// to, after name resolution, so that a host name cannot lead where a
// literal address may not.
func (p Policy) DialControl(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if p.checkHost("connection", normalizeHost(host)) != nil {
		return ErrLinkLocalDial
	}
	return nil
}
