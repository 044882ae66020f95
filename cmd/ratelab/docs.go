package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newDocsCmd is ratelab gen-docs DIR, hidden: it writes a markdown page per
// command, generated from the commands themselves (make docs).
func newDocsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-docs DIR",
		Short:  "Write the command reference as markdown into DIR",
		Hidden: true,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("gen-docs takes one directory (got %d arguments)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			root.DisableAutoGenTag = true // no date: the pages change only when a command does
			return doc.GenMarkdownTree(root, args[0])
		},
	}
}
