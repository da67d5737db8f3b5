// pgdrain/testing: run a workflow to its end inside a test, against a real PostgreSQL, with a
// virtual clock (sleeps and timeouts skip ahead), events sent as it waits, and stubbed steps; and
// checkWorkflows, the pre-deploy check (`pgdrain workflows check`) as a function.
export {
  testWorkflow,
  type TestWorkflowOptions,
  type TestWorkflowResult,
  type StepStub,
} from '../workflows/testing.ts';
export {
  checkWorkflows,
  type CheckWorkflowsOptions,
  type WorkflowCheckProblem,
  type WorkflowCheckReport,
} from '../workflows/check.ts';
