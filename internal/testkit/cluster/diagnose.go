package cluster

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"strings"
)

// serverFault is the server log's first fatal or error entry from byte
// from on, as one line ("msg: error"), and what to change for the faults
// an operator meets at start; "" when the log has none.
func serverFault(logPath string, from int64) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return ""
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	// Every error the start wrote, in order: the one a hint knows wins
	// (the server wraps its cause in several generic lines), else the
	// first fatal, else the first.
	var faults []string
	fatal := -1
	for sc.Scan() {
		var e struct {
			Level, Msg, Error string
		}
		line := strings.TrimSpace(sc.Text())
		if json.Unmarshal([]byte(line), &e) != nil {
			// Not JSON: the server's own start-up failures print plain text.
			if l := strings.ToLower(line); strings.Contains(l, "error") || strings.Contains(l, "failed") {
				faults = append(faults, line)
			}
			continue
		}
		if e.Level != "fatal" && e.Level != "error" && e.Level != "dpanic" && e.Level != "panic" {
			continue
		}
		m := e.Msg
		if e.Error != "" {
			m += ": " + e.Error
		}
		if e.Level == "fatal" && fatal < 0 {
			fatal = len(faults)
		}
		faults = append(faults, m)
	}
	for _, f := range faults {
		if h := hint(f); h != "" {
			return f + h
		}
	}
	switch {
	case fatal >= 0:
		return faults[fatal]
	case len(faults) > 0:
		return faults[0]
	}
	return ""
}

// hint names the setting to change for a start-up fault the server's
// own words leave to guesswork.
func hint(fault string) string {
	f := strings.ToLower(fault)
	switch {
	case strings.Contains(f, "password authentication failed"):
		return " (the datastores' user and password in the server config, or PostgreSQL's pg_hba.conf)"
	case strings.Contains(f, "does not exist") && strings.Contains(f, "database"):
		return " (create it and its schema: temporal-sql-tool --db <name> create, then setup-schema -v 0.0 and update-schema)"
	case strings.Contains(f, "schema version") || strings.Contains(f, "version compatibility") || strings.Contains(f, "schema_version"):
		return " (migrate: temporal-sql-tool update-schema --schema-name postgresql/v12/temporal, and …/visibility for the visibility database)"
	case strings.Contains(f, "connection refused") && strings.Contains(f, "sql"):
		return " (PostgreSQL at the datastores' connectAddr is not listening)"
	case strings.Contains(f, "certificate") || strings.Contains(f, "tls"):
		return " (global.tls in the server config: the certificate, its key and the CA that signed it)"
	}
	return ""
}
