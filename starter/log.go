package main

import (
	"log/slog"
	"os"
)

func slogWarn() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
