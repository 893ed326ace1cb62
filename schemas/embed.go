package schemas

import _ "embed"

// HarnessSchema is the JSON Schema of harness files (harness.schema.json);
// editors with a YAML language server can use it too.
//
//go:embed harness.schema.json
var HarnessSchema []byte
