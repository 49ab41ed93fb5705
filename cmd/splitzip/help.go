package main

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// setHelp makes help, and the commands that only group others, keep the
// rules of every other path: with --json one JSON document on stdout, and
// a usage error for what is not a command.
func setHelp(g *globals, root *cobra.Command) {
	text := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, a []string) {
		if !g.JSON {
			text(c, a)
			return
		}
		var b bytes.Buffer
		c.SetOut(&b)
		text(c, a)
		c.SetOut(nil)
		root.SetOut(g.stdout)
		printJSON(g.stdout, "help", map[string]any{"command": c.CommandPath(), "usage": b.String()})
	})
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(_ *cobra.Command, a []string) error {
			c, rest, err := root.Find(a)
			if err != nil || len(rest) > 0 && c.HasSubCommands() {
				return usageError{fmt.Errorf("no help for %q: there is no such command", strings.Join(a, " "))}
			}
			return c.Help()
		},
	})
	// The completion scripts are shell text, which --json cannot carry.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		for _, sh := range c.Commands() {
			run := sh.RunE
			sh.RunE = func(cmd *cobra.Command, a []string) error {
				if g.JSON {
					return usageError{fmt.Errorf("%s prints a shell script: run it without --json", cmd.CommandPath())}
				}
				return run(cmd, a)
			}
		}
	}
	groups(root)
}

// groups gives every command that only groups others (bench, completion)
// a run that shows its help, or refuses an argument that names none of
// them, as the root command does.
func groups(c *cobra.Command) {
	for _, sub := range c.Commands() {
		groups(sub)
	}
	if c.HasParent() && c.HasSubCommands() && !c.Runnable() {
		c.RunE = func(cmd *cobra.Command, a []string) error {
			if len(a) > 0 {
				return usageError{fmt.Errorf("unknown command %q for %q", a[0], cmd.CommandPath())}
			}
			return cmd.Help()
		}
	}
}
