package blobproxy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The proxy's TLS Secret holds these keys: kubernetes.io/tls's two and the CA that the node
// agents verify the proxy with (the names cert-manager uses too). The agents mount ca.crt
// alone, never the key.
const (
	TLSCAKey   = "ca.crt"
	tlsCertKey = corev1.TLSCertKey
	tlsKeyKey  = corev1.TLSPrivateKeyKey
)

// GeneratedAnnotation marks a TLS Secret the manager made: it makes that one again when its
// certificate no longer fits (names, expiry), and never replaces one it did not make.
const GeneratedAnnotation = "cairn.dev/generated-by"

const generatedBy = "cairn-manager"

// certificateValidity is how long a generated certificate lasts, and renewBefore how long
// before its end the manager makes a new one (at its next start): the proxy loads its
// certificate when it starts, so a long life and a wide margin mean no rotation while it runs.
const (
	certificateValidity = 10 * 365 * 24 * time.Hour
	renewBefore         = 90 * 24 * time.Hour
)

// ServingNames are the DNS names of the proxy's Service, which its certificate must hold:
// the agents reach it as <service>.<namespace>.svc.
func ServingNames(service, namespace string) []string {
	return []string{
		service, service + "." + namespace, service + "." + namespace + ".svc",
		service + "." + namespace + ".svc.cluster.local",
	}
}

// ServingTLS returns the proxy's TLS configuration from the Secret name in namespace (read
// through r, written through w). A Secret that does not exist is made, with a new CA and a
// serving certificate for names signed by it; one the manager made whose certificate no
// longer fits is made again; one it did not make is used as it is, and must fit.
func ServingTLS(ctx context.Context, r client.Reader, w client.Writer, namespace, name string, names []string, now time.Time) (*tls.Config, error) {
	if len(names) == 0 {
		return nil, errors.New("the repository server's TLS certificate needs a DNS name to serve")
	}
	var cert tls.Certificate
	err := retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		var err error
		cert, err = ensureServingSecret(ctx, r, w, client.ObjectKey{Namespace: namespace, Name: name}, names, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("the repository server's TLS Secret %s/%s: %w", namespace, name, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// ensureServingSecret is one try of ServingTLS.
func ensureServingSecret(ctx context.Context, r client.Reader, w client.Writer, key client.ObjectKey, names []string, now time.Time) (tls.Certificate, error) {
	var s corev1.Secret
	err := r.Get(ctx, key, &s)
	missing := apierrors.IsNotFound(err)
	if err != nil && !missing {
		return tls.Certificate{}, err
	}
	if !missing {
		unfit := checkServing(s.Data, names, now)
		if unfit == nil {
			return tls.X509KeyPair(s.Data[tlsCertKey], s.Data[tlsKeyKey])
		}
		if s.Annotations[GeneratedAnnotation] != generatedBy {
			return tls.Certificate{}, fmt.Errorf("it was not made by Cairn, and cannot serve: %w", unfit)
		}
	}
	data, err := generateServing(names, now)
	if err != nil {
		return tls.Certificate{}, err
	}
	s.Name, s.Namespace, s.Type, s.Data = key.Name, key.Namespace, corev1.SecretTypeTLS, data
	metav1.SetMetaDataAnnotation(&s.ObjectMeta, GeneratedAnnotation, generatedBy)
	if missing {
		err = w.Create(ctx, &s)
	} else {
		err = w.Update(ctx, &s) // conditional on the resourceVersion read
	}
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(data[tlsCertKey], data[tlsKeyKey])
}

// checkServing says why the certificate of a TLS Secret's data cannot serve names at now, nil
// if it can: it and its key parse and match, ca.crt verifies it, it holds every name, and it
// is valid for at least renewBefore.
func checkServing(data map[string][]byte, names []string, now time.Time) error {
	for _, k := range []string{TLSCAKey, tlsCertKey, tlsKeyKey} {
		if len(data[k]) == 0 {
			return fmt.Errorf("it has no %s", k)
		}
	}
	pair, err := tls.X509KeyPair(data[tlsCertKey], data[tlsKeyKey])
	if err != nil {
		return fmt.Errorf("%s and %s: %w", tlsCertKey, tlsKeyKey, err)
	}
	leaf := pair.Leaf
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data[TLSCAKey]) {
		return fmt.Errorf("%s holds no PEM certificate", TLSCAKey)
	}
	intermediates := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			intermediates.AddCert(c)
		}
	}
	for _, name := range names {
		opts := x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: intermediates, CurrentTime: now}
		if _, err := leaf.Verify(opts); err != nil {
			return fmt.Errorf("the certificate does not serve %s under %s: %w", name, TLSCAKey, err)
		}
	}
	if left := leaf.NotAfter.Sub(now); left < renewBefore {
		return fmt.Errorf("the certificate expires at %s, in less than %s", leaf.NotAfter.UTC().Format(time.RFC3339), renewBefore)
	}
	return nil
}

// generateServing makes a CA and a serving certificate for names signed by it (ECDSA P-256,
// valid certificateValidity from now), as a TLS Secret's data.
func generateServing(names []string, now time.Time) (map[string][]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTemplate := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "cairn-repository-ca"},
		NotBefore:             now.Add(-time.Hour), // a node whose clock is a little behind
		NotAfter:              now.Add(certificateValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := createCertificate(caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafTemplate := &x509.Certificate{
		Subject:     pkix.Name{CommonName: names[0]},
		DNSNames:    slices.Clone(names),
		NotBefore:   caTemplate.NotBefore,
		NotAfter:    caTemplate.NotAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := createCertificate(leafTemplate, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		TLSCAKey:   pemBlock("CERTIFICATE", caDER),
		tlsCertKey: pemBlock("CERTIFICATE", leafDER),
		tlsKeyKey:  pemBlock("EC PRIVATE KEY", keyDER),
	}, nil
}

// createCertificate signs template with a random serial number.
func createCertificate(template, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	template.SerialNumber = serial
	return x509.CreateCertificate(rand.Reader, template, parent, pub, signer)
}

func pemBlock(typ string, der []byte) []byte {
	var b bytes.Buffer
	_ = pem.Encode(&b, &pem.Block{Type: typ, Bytes: der})
	return b.Bytes()
}
