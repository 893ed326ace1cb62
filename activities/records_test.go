package activities_test

import (
	"go.temporal.io/sdk/testsuite"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/store"
)

// controlEnv is an activity environment running the control activities
// against s.
func controlEnv(s *store.Store) *testsuite.TestActivityEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(&activities.Control{Store: s})
	return env
}
