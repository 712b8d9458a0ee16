mod apply;
mod faults;
mod nested;
mod project;
mod remote;
mod scratch;
mod support;
