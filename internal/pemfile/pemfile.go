// Package pemfile reads the PEM files of a TLS configuration: a pool of CA
// certificates, and a certificate with its key. Its errors name the files.
package pemfile

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// CertPool reads the certificates of the PEM file at path into a pool.
func CertPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// KeyPair reads a certificate (with its chain) and its private key from
// the PEM files certFile and keyFile.
func KeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s with %s: %w", certFile, keyFile, err)
	}
	return cert, nil
}
