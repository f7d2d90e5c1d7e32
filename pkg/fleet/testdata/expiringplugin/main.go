// Command expiringplugin is an exec credential plugin for tests, on the
// Cluster Inventory API's credentialplugin protocol: it returns the token in
// $TOKEN_FILE, expiring after $TOKEN_TTL, and appends a line to $CALLS at
// every call.
package main

import (
	"context"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientauthenticationv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentialplugin"
)

type provider struct{}

func (provider) Name() string { return "expiring" }

func (provider) GetToken(context.Context, clientauthenticationv1.ExecCredential) (clientauthenticationv1.ExecCredentialStatus, error) {
	token, err := os.ReadFile(os.Getenv("TOKEN_FILE"))
	if err != nil {
		return clientauthenticationv1.ExecCredentialStatus{}, err
	}
	ttl, err := time.ParseDuration(os.Getenv("TOKEN_TTL"))
	if err != nil {
		return clientauthenticationv1.ExecCredentialStatus{}, err
	}
	calls, err := os.OpenFile(os.Getenv("CALLS"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return clientauthenticationv1.ExecCredentialStatus{}, err
	}
	_, err = calls.WriteString(time.Now().Format(time.RFC3339Nano) + "\n")
	if cerr := calls.Close(); err == nil {
		err = cerr
	}
	expires := metav1.NewTime(time.Now().Add(ttl))
	return clientauthenticationv1.ExecCredentialStatus{Token: strings.TrimSpace(string(token)), ExpirationTimestamp: &expires}, err
}

func main() { credentialplugin.Run(provider{}) }
