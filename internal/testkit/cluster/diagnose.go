package cluster

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
)

// serverFault is the server log's first fatal or error entry, as one
// line ("msg: error"), and what to change for the faults an operator
// meets at start; "" when the log has none.
func serverFault(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var first string
	for sc.Scan() {
		var e struct {
			Level, Msg, Error string
		}
		line := sc.Text()
		if json.Unmarshal([]byte(line), &e) != nil {
			// Not JSON: the server's own start-up failures print plain text.
			if strings.Contains(strings.ToLower(line), "error") && first == "" {
				first = strings.TrimSpace(line)
			}
			continue
		}
		if e.Level != "fatal" && e.Level != "error" && e.Level != "dpanic" && e.Level != "panic" {
			continue
		}
		s := e.Msg
		if e.Error != "" {
			s += ": " + e.Error
		}
		if e.Level == "fatal" || first == "" {
			first = s
		}
		if e.Level == "fatal" {
			break
		}
	}
	if first == "" {
		return ""
	}
	return first + hint(first)
}

// hint names the setting to change for a start-up fault the server's
// own words leave to guesswork.
func hint(fault string) string {
	f := strings.ToLower(fault)
	switch {
	case strings.Contains(f, "password authentication failed"):
		return " (the datastores' user and password in the server config, or PostgreSQL's pg_hba.conf)"
	case strings.Contains(f, "does not exist") && strings.Contains(f, "database"):
		return " (create the database: temporal-sql-tool --db <name> create, then setup-schema and update-schema)"
	case strings.Contains(f, "schema version") || strings.Contains(f, "version compatibility") || strings.Contains(f, "schema_version"):
		return " (migrate: temporal-sql-tool update-schema --schema-name postgresql/v12/temporal, and …/visibility for the visibility database)"
	case strings.Contains(f, "connection refused") && strings.Contains(f, "sql"):
		return " (PostgreSQL at the datastores' connectAddr is not listening)"
	case strings.Contains(f, "certificate") || strings.Contains(f, "tls"):
		return " (global.tls in the server config: the certificate, its key and the CA that signed it)"
	}
	return ""
}
