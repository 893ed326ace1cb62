package main

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/roundhouse-rl/roundhouse/internal/harness"
)

func validateCmd() *cobra.Command {
	var config string
	var vars []string
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check a harness file against schemas/harness.schema.json and Roundhouse's rules",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config == "" {
				return fmt.Errorf("--config is required: pass the harness file, e.g. --config harnesses/minimal/harness.yaml")
			}
			overrides, err := harness.ParseVars(vars)
			if err != nil {
				return err
			}
			probs, err := harness.Validate(config, overrides)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(probs) > 0 {
				for _, p := range probs {
					line := ""
					if p.Line > 0 {
						line = fmt.Sprintf(":%d", p.Line)
					}
					fmt.Fprintf(out, "%s%s: %s\n", config, line, p)
				}
				return fmt.Errorf("%s: %d problem(s)", config, len(probs))
			}
			h, err := harness.Load(config, overrides)
			if err != nil {
				return err
			}
			var services []string
			for _, s := range h.Services {
				services = append(services, s.Name)
			}
			fmt.Fprintf(out, "%s: ok — harness %s (digest %s), %d tasks, services [%s], adapter %s\n",
				config, h.Name, h.Digest, len(h.Tasks), strings.Join(services, " "), h.Episode.Outcome.Adapter)
			if p := h.Protocol; p.Name != "" || p.Episodes > 0 || len(p.Suites) > 0 {
				ids, _ := harness.IDs(h, "eval_init_ids") // checked by Load
				fmt.Fprintf(out, "final-score protocol %s: %d required tasks × %d eval_init_ids = %d episodes\n",
					cmp.Or(p.Name, "(unnamed)"), len(h.RequiredTasks()), len(ids), len(h.RequiredTasks())*len(ids))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "harness file")
	cmd.Flags().StringArrayVar(&vars, "var", nil, "override a harness var: --var name=value (repeatable)")
	return cmd
}
