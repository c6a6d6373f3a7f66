package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"slices"
)

// grpcTLSOptions are the --grpc-tls-* flags: TLS, and optionally mutual
// TLS, on the gRPC listener (part of Options).
type grpcTLSOptions struct {
	GRPCTLSCert      string
	GRPCTLSKey       string
	GRPCTLSClientCA  string
	GRPCTLSClientSAN string
}

// grpcTLSFlags adds the --grpc-tls-* flags to fs.
func grpcTLSFlags(fs *flag.FlagSet, o *grpcTLSOptions) {
	fs.StringVar(&o.GRPCTLSCert, "grpc-tls-cert", "", "PEM certificate (chain) of the gRPC listener: serve gRPC over TLS (with --grpc-tls-key); read at start")
	fs.StringVar(&o.GRPCTLSKey, "grpc-tls-key", "", "PEM private key of --grpc-tls-cert")
	fs.StringVar(&o.GRPCTLSClientCA, "grpc-tls-client-ca", "", "PEM CA bundle: require every gRPC client to present a certificate it signed (mutual TLS)")
	fs.StringVar(&o.GRPCTLSClientSAN, "grpc-tls-client-san", "", "with --grpc-tls-client-ca: also require this DNS name, URI, IP address or e-mail among the client certificate's subject alternative names")
}

// check refuses TLS flags that cannot work together, without reading the
// files.
func (o *grpcTLSOptions) check(given map[string]given) error {
	var errs []error
	need := func(name, want string) {
		errs = append(errs, fmt.Errorf("%s: must be %s", label(name, given), want))
	}
	switch {
	case o.GRPCTLSCert != "" && o.GRPCTLSKey == "":
		need("grpc-tls-key", "given together with --grpc-tls-cert (TLS needs both)")
	case o.GRPCTLSKey != "" && o.GRPCTLSCert == "":
		need("grpc-tls-cert", "given together with --grpc-tls-key (TLS needs both)")
	}
	if o.GRPCTLSClientCA != "" && o.GRPCTLSCert == "" {
		need("grpc-tls-cert", "set when --grpc-tls-client-ca is (mutual TLS is TLS)")
	}
	if o.GRPCTLSClientSAN != "" && o.GRPCTLSClientCA == "" {
		need("grpc-tls-client-ca", "set when --grpc-tls-client-san is (the name is checked on verified client certificates)")
	}
	return errors.Join(errs...)
}

// tlsConfig reads the files and returns the gRPC listener's TLS configuration,
// or nil when TLS is off. The certificate is read once, at start.
func (o *grpcTLSOptions) tlsConfig() (*tls.Config, error) {
	if o.GRPCTLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(o.GRPCTLSCert, o.GRPCTLSKey)
	if err != nil {
		return nil, fmt.Errorf("--grpc-tls-cert/--grpc-tls-key: must be a PEM certificate and its key: %w", err)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if o.GRPCTLSClientCA == "" {
		return tc, nil
	}
	pool, err := readCAPool("grpc-tls-client-ca", o.GRPCTLSClientCA)
	if err != nil {
		return nil, err
	}
	tc.ClientCAs = pool
	tc.ClientAuth = tls.RequireAndVerifyClientCert
	if san := o.GRPCTLSClientSAN; san != "" {
		tc.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			// Called after the chain is verified: chains[0][0] is the leaf.
			if len(chains) == 0 || len(chains[0]) == 0 || !hasSAN(chains[0][0], san) {
				return fmt.Errorf("client certificate does not name %q among its subject alternative names", san)
			}
			return nil
		}
	}
	return tc, nil
}

// hasSAN reports whether c names san as a DNS name, URI, IP address or
// e-mail address.
func hasSAN(c *x509.Certificate, san string) bool {
	if slices.Contains(c.DNSNames, san) || slices.Contains(c.EmailAddresses, san) {
		return true
	}
	for _, ip := range c.IPAddresses {
		if ip.String() == san {
			return true
		}
	}
	for _, u := range c.URIs {
		if u.String() == san {
			return true
		}
	}
	return false
}
