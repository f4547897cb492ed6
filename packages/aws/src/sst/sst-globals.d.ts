/* eslint-disable @typescript-eslint/no-explicit-any -- a stand-in: the real types are the app's */
// Build-time stand-in for the globals SST declares in an app's `.sst/platform/config.d.ts`
// (`sst`, `aws`, `$util`, `$app`, `$dev`, `$interpolate`, `$jsonStringify`). It only names what
// the component uses, so that the package builds without an SST install; it is not shipped. The
// emitted .d.ts refers to these names, which resolve to the app's real SST types, and
// test/aws/sst-components.test.ts type-checks this source against SST's real platform
// (tsconfig.sst.json at the repository root).

declare namespace $util {
  interface Output<T> {
    apply<U>(f: (value: T) => Input<U>): Output<U>;
  }
  type Input<T> = T | Promise<T> | Output<T>;
  type Resource = any;
  type CustomResourceOptions = any;
  type ComponentResourceOptions = any;
  type ComponentResource = any;
  const ComponentResource: any;
  const output: any;
  const all: any;
  const secret: any;
}

declare const $app: { readonly name: string; readonly stage: string };
declare const $dev: boolean;
declare const $interpolate: any;
declare const $jsonStringify: any;

declare namespace sst {
  type Secret = any;
  const Secret: any;
  type Linkable<_T = any> = any;
  const Linkable: any;
  namespace aws {
    type Vpc = any;
    type Postgres = any;
    const Postgres: any;
    type PostgresArgs = any;
    type Aurora = any;
    const Aurora: any;
    type AuroraArgs = any;
    type Function = any;
    const Function: any;
    type FunctionArgs = any;
    type CronV2 = any;
    const CronV2: any;
    const permission: any;
  }
  namespace x {
    const DevCommand: any;
  }
}

declare namespace aws {
  const getRegionOutput: any;
  const getPartitionOutput: any;
  const getCallerIdentityOutput: any;
  namespace cloudwatch {
    type MetricAlarm = any;
    const MetricAlarm: any;
  }
  namespace ec2 {
    type SecurityGroup = any;
    const SecurityGroup: any;
    const VpcEndpoint: any;
  }
  namespace iam {
    type Role = any;
    const Role: any;
    const RolePolicy: any;
  }
  namespace lambda {
    type Invocation = any;
    const Invocation: any;
  }
  namespace rds {
    type Instance = any;
    type Cluster = any;
    type Proxy = any;
    type ParameterGroupArgs = any;
  }
  namespace scheduler {
    type Schedule = any;
    const Schedule: any;
  }
  namespace secretsmanager {
    type Secret = any;
    const Secret: any;
    type SecretVersion = any;
    const SecretVersion: any;
    const getSecretVersionOutput: any;
  }
  namespace sns {
    type Topic = any;
    const Topic: any;
    const TopicSubscription: any;
  }
}
