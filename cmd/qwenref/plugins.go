package main

import (
	"flag"
	"fmt"

	"github.com/qwenref/qwenref/plugin"
)

// pluginList collects repeated --plugin NAME=PATH.so flags.
type pluginList []string

// addPluginFlag adds --plugin to a command that takes --backend or
// --backends; loadPlugins registers the libraries before the backend is
// parsed, so the spec can name them.
func addPluginFlag(fs *flag.FlagSet) *pluginList {
	var l pluginList
	fs.Func("plugin", "NAME=PATH.so: load a kernel library (plugin/qwenref_plugin.h) and register NAME for each op it exports, e.g. --backend chunked:delta=NAME (repeatable)", func(v string) error {
		if _, _, err := plugin.ParseFlag(v); err != nil {
			return err
		}
		l = append(l, v)
		return nil
	})
	return &l
}

// loadPlugins loads every --plugin given, in order.
func loadPlugins(l *pluginList) error {
	if l == nil {
		return nil
	}
	for _, v := range *l {
		name, path, _ := plugin.ParseFlag(v)
		if _, err := plugin.Load(name, path); err != nil {
			return fmt.Errorf("--plugin: %w", err)
		}
	}
	return nil
}
