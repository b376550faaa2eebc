// Package deploy holds the deployment files (Dockerfile support, Compose,
// Kubernetes, systemd, Prometheus, Grafana); its tests check them against the
// gateway itself: the flags' defaults in cmd/gateway/serve.go, the admin
// endpoints the server really serves, and the rule validator.
//
// It holds no code the gateway runs and must not: nothing imports it, and
// the files here must not set behaviour the binary does not have (a flag,
// a port or an endpoint the tests cannot find in the gateway).
package deploy
