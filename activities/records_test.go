package activities_test

import (
	"go.temporal.io/sdk/testsuite"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/store"
)

// recordsEnv is an activity environment running the Records activities
// against s.
func recordsEnv(s *store.Store) *testsuite.TestActivityEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(&activities.Records{Store: s})
	return env
}
