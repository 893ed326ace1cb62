package codec

import (
	"net/http"

	"go.temporal.io/sdk/converter"
)

// Handler serves the Temporal codec-server protocol (POST /encode and
// /decode) for the Temporal UI and CLI, answering CORS preflights from
// uiOrigin (e.g. http://127.0.0.1:8233) so the browser may call it. Anyone
// who can reach it can decrypt payloads: serve it on loopback, or behind
// authentication.
func Handler(c *Codec, uiOrigin string) http.Handler {
	h := converter.NewPayloadCodecHTTPHandler(c)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if uiOrigin != "" && r.Header.Get("Origin") == uiOrigin {
			w.Header().Set("Access-Control-Allow-Origin", uiOrigin)
			w.Header().Set("Access-Control-Allow-Credentials", "true")
			w.Header().Set("Access-Control-Allow-Methods", "POST, OPTIONS")
			w.Header().Set("Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization")
			w.Header().Add("Vary", "Origin")
		}
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if r.Method != http.MethodPost {
			http.Error(w, "POST /encode or /decode", http.StatusMethodNotAllowed)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<20)
		h.ServeHTTP(w, r)
	})
}
