mod apply;
mod faults;
mod project;
mod remote;
mod scratch;
mod support;
