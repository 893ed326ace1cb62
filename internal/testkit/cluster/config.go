package cluster

import (
	"bytes"
	"fmt"
	"text/template"
)

// DynamicConfigFile is the server's dynamic configuration, from the
// repository's root: the file deploy/compose mounts into its server too.
const DynamicConfigFile = "deploy/compose/dynamicconfig/temporal.yaml"

// Services are the Temporal server's services, one process each, in the
// order they start: history and matching first, so the frontend finds
// them, the worker (its system workflows) last.
var Services = []string{"history", "matching", "frontend", "worker"}

// Ports are the cluster's: each service's gRPC and membership port, the
// frontend's HTTP port, PostgreSQL's and the UI's.
type Ports struct {
	GRPC, Membership map[string]int
	HTTP, Postgres   int
	UI               int
}

// serverConfig is what the server's configuration file is made from.
type serverConfig struct {
	IP             string
	Ports          Ports
	Certs          Certs
	PGPassword     string
	DynamicConfig  string
	HistoryShards  int
	MetricsEnabled bool
}

// One file for every service: each reads the others' ports from it.
// Membership (ringpop) is plain TCP on the services' own addresses, as
// the server's own production template has it; gRPC between services
// and from clients is mTLS.
var configTemplate = template.Must(template.New("temporal").Parse(`# Written by internal/testkit/cluster: the production-shaped rehearsal.
log:
  stdout: true
  level: warn
  format: json

persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: {{.HistoryShards}}
  datastores:
    default:
      sql:
        pluginName: postgres12
        databaseName: temporal
        connectAddr: "{{.IP}}:{{.Ports.Postgres}}"
        connectProtocol: tcp
        user: temporal
        password: "{{.PGPassword}}"
        maxConns: 20
        maxIdleConns: 20
        maxConnLifetime: 1h
    visibility:
      sql:
        pluginName: postgres12
        databaseName: temporal_visibility
        connectAddr: "{{.IP}}:{{.Ports.Postgres}}"
        connectProtocol: tcp
        user: temporal
        password: "{{.PGPassword}}"
        maxConns: 10
        maxIdleConns: 10
        maxConnLifetime: 1h

global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: "{{.IP}}"
  pprof:
    port: 0
  tls:
    refreshInterval: 0s
    internode:
      server:
        certFile: {{.Certs.Internode}}
        keyFile: {{.Certs.InternodeKey}}
        requireClientAuth: true
        clientCaFiles: [{{.Certs.CA}}]
      client:
        serverName: {{.ServerName}}
        rootCaFiles: [{{.Certs.CA}}]
    frontend:
      server:
        certFile: {{.Certs.Frontend}}
        keyFile: {{.Certs.FrontendKey}}
        requireClientAuth: true
        clientCaFiles: [{{.Certs.CA}}]
      client:
        serverName: {{.ServerName}}
        rootCaFiles: [{{.Certs.CA}}]

services:
{{- range $s := .Services}}
  {{$s}}:
    rpc:
      grpcPort: {{index $.Ports.GRPC $s}}
      membershipPort: {{index $.Ports.Membership $s}}
      bindOnIP: "{{$.IP}}"
{{- if eq $s "frontend"}}
      httpPort: {{$.Ports.HTTP}}
{{- end}}
{{- end}}

clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcAddress: "{{.IP}}:{{index .Ports.GRPC "frontend"}}"
      httpAddress: "{{.IP}}:{{.Ports.HTTP}}"

dcRedirectionPolicy:
  policy: noop

archival:
  history:
    state: disabled
    enableRead: false
  visibility:
    state: disabled
    enableRead: false

namespaceDefaults:
  archival:
    history:
      state: disabled
    visibility:
      state: disabled

dynamicConfigClient:
  filepath: {{.DynamicConfig}}
  pollInterval: 10s
`))

// render writes the server's configuration.
func (c serverConfig) render() ([]byte, error) {
	var b bytes.Buffer
	data := struct {
		serverConfig
		Services   []string
		ServerName string
	}{c, Services, ServerName}
	if err := configTemplate.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("temporal server config: %w", err)
	}
	return b.Bytes(), nil
}
